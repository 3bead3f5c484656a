"""The gRPC service: a thin translation between protobuf messages and ranker pipelines."""
