// hipscale._native: a Python extension (C API, no torch) that links libamdhip64
// and launches a kernel: `device_count()` and `scale(list, a)`. HIP errors
// become RuntimeError with HIP's own message (on a machine without a GPU:
// "no ROCm-capable device is detected"). Built by hipbackend.py against the ROCm packages.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <hip/hip_runtime.h>
#include <vector>

__global__ void hipscale_kernel(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

static PyObject *hip_error(const char *what, hipError_t e) {
    PyErr_Format(PyExc_RuntimeError, "%s: %s", what, hipGetErrorString(e));
    return nullptr;
}

static PyObject *device_count(PyObject *, PyObject *) {
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess) return hip_error("hipGetDeviceCount", e);
    return PyLong_FromLong(n);
}

static PyObject *scale(PyObject *, PyObject *args) {
    PyObject *seq;
    double a;
    if (!PyArg_ParseTuple(args, "Od", &seq, &a)) return nullptr;
    PyObject *fast = PySequence_Fast(seq, "scale() takes a sequence of numbers");
    if (!fast) return nullptr;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    std::vector<float> host(n);
    for (Py_ssize_t i = 0; i < n; i++) host[i] = (float)PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    if (PyErr_Occurred()) return nullptr;
    float *dev = nullptr;
    hipError_t e = hipMalloc(&dev, n * sizeof(float));
    if (e != hipSuccess) return hip_error("hipMalloc", e);
    e = hipMemcpy(dev, host.data(), n * sizeof(float), hipMemcpyHostToDevice);
    if (e == hipSuccess) {
        hipLaunchKernelGGL(hipscale_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, dev, (float)a, (int)n);
        e = hipDeviceSynchronize();
    }
    if (e == hipSuccess) e = hipMemcpy(host.data(), dev, n * sizeof(float), hipMemcpyDeviceToHost);
    (void)hipFree(dev);
    if (e != hipSuccess) return hip_error("scale", e);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(out, i, PyFloat_FromDouble(host[i]));
    return out;
}

static PyMethodDef methods[] = {
    {"device_count", device_count, METH_NOARGS, "Number of HIP devices."},
    {"scale", scale, METH_VARARGS, "Multiply a list by a on the GPU."},
    {nullptr, nullptr, 0, nullptr},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hipscale._native", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
