"""The loop: observe -> validate -> render -> plan -> apply/prune -> status and events."""
