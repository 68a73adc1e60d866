"""The CRD boundary: policy types, their schema and their validation, from one source."""
