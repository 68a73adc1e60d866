"""Trace replay: judge a policy against real cluster traces before it touches a cluster."""
