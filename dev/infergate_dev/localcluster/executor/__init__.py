"""The local executor: a node agent that runs its pods as local processes.

Pods bound to the executor's nodes run for real: each container's command and
args from the environment its image maps to (a venv), with the downward API,
ConfigMap/Secret/projected volumes and the ServiceAccount token in place, a
loopback pod IP of its own, probes honoured and status written back the way a
kubelet does.
"""
