"""A real API server and etcd for tests and the demo (like controller-runtime's envtest)."""
