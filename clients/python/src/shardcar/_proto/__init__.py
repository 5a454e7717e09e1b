"""Generated protobuf/gRPC stubs for shardcar.v1 (scripts/gen_stubs.sh; do not edit)."""
