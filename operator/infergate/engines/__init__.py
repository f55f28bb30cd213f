"""Driving engines for parity records: launching servers, HTTP clients, in-process drivers.

`client` (httpx and numpy only) is what the parity runner uses against live endpoints;
`launch` starts engine servers from their venvs; `record` turns a suite into a
ParityRecord through a client or an in-process engine.
"""
