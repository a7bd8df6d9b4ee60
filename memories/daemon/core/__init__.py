"""What every request of the daemon stands on: the request context, jobs, the worker handles, the store gate, the
device-only egress rule, and the mappings of views and filters. It imports no other wing of the daemon."""
