"""End-to-end runs against a real API server: `make demo` (e2e.demo)."""
