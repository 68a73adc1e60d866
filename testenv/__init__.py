"""The test harness that tests, e2e and the benchmarks share; not part of the controller image.

The test control plane (`controlplane`: etcd and the API server, like controller-runtime's
envtest), a real Prometheus (`prometheus`), kustomize and libfaketime, the CRDs they load
(`crds`), and what runs the controller against them and judges it from outside: the controller
as a process (`controller_process`), the fault and counting proxies in front of the API server
(`faultproxy`, `counting`) and the RBAC matching of what they record (`rbac`), its JSON log
(`logtail`), /proc (`procstat`) and /metrics (`scrape`), Kueue's part on Workloads
(`kueue_standin`), a one-thread load scheduler (`scheduler`) and the reports' summaries
(`stats`). The controller never imports it (an import-linter contract); the image deletes it.
"""
