"""Pure rendering: a validated policy and a mix in, the desired Kubernetes objects out."""
