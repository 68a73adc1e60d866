"""The only code that imports `kubernetes`: client, kinds, watches, apply, leases, events."""
