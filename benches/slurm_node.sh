# Sourced by the benchmarks that need a scheduler (benches/matrix_slurm.sh,
# benches/wheel_merge.sh): `slurm_node DIR` starts a one-node Slurm from
# Debian (munged, slurmctld, slurmd, as tests/e2e/common/slurm.rs starts it,
# without GPUs) with its config, state and ports under DIR, exports
# SLURM_CONF, and adds the daemons' pids to $pids for the caller's cleanup
# (which also runs `scancel`). POSIX sh.

slurm_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

slurm_node() { # DIR
    s=$1
    mkdir -p "$s/state" "$s/spool" "$s/log" "$s/munge"
    chmod 700 "$s/munge"
    mungekey -c -k "$s/munge/munge.key" >/dev/null 2>&1
    chmod 600 "$s/munge/munge.key"
    munged --foreground --key-file="$s/munge/munge.key" --socket="$s/munge/munge.sock" \
        --pid-file="$s/munge/munged.pid" --log-file="$s/munge/munged.log" --seed-file="$s/munge/seed" --force \
        >/dev/null 2>&1 &
    pids="$pids $!"
    for _ in $(seq 1 100); do [ -S "$s/munge/munge.sock" ] && break; sleep 0.1; done
    cat > "$s/slurm.conf" <<EOF
ClusterName=quarrybench
SlurmctldHost=localhost
SlurmctldPort=$(slurm_free_port)
SlurmdPort=$(slurm_free_port)
AuthType=auth/munge
AuthInfo=socket=$s/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=localhost CPUs=$(nproc) RealMemory=8000 State=UNKNOWN
PartitionName=quarry Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$s/slurm.conf"
    slurmctld -D -f "$SLURM_CONF" >/dev/null 2>&1 &
    pids="$pids $!"
    slurmd -D -f "$SLURM_CONF" >/dev/null 2>&1 &
    pids="$pids $!"
    for _ in $(seq 1 300); do [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break; sleep 0.2; done
    [ "$(sinfo -h -o %T)" = idle ] || { echo "Slurm did not come up:"; tail -20 "$s/log/slurmctld.log" "$s/log/slurmd.log"; exit 1; } >&2
}
