# Parses an in-toto statement with the in-toto attestation models (PyPI
# in-toto-attestation): the Statement v1 and SLSA Provenance v1 protos, strict
# (an unknown or misspelt field fails), then each descriptor checked as the
# models check them. Prints counts as JSON.
import json, sys
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
doc = json.load(open(sys.argv[1]))
st = json_format.ParseDict(doc, statement_pb2.Statement())
Statement.copy_from_pb(st).validate()
assert st.predicate_type == "https://slsa.dev/provenance/v1", st.predicate_type
prov = json_format.ParseDict(doc["predicate"], provenance_pb2.Provenance())
for rd in prov.build_definition.resolved_dependencies:
    ResourceDescriptor.copy_from_pb(rd).validate()
print(json.dumps({"subjects": len(st.subject), "dependencies": len(prov.build_definition.resolved_dependencies), "builder": prov.run_details.builder.id}))
