"""The only code that talks to the API server: a JSON client with our own errors, and the
writer that applies a reconcile plan."""
