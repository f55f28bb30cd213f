"""infergate_dev: the development machinery beside the product, never inside it.

The local cluster (a real control plane with a local executor standing in for the
kubelet, its PKI, process supervision and Prometheus wiring) and the Helm chart
generator. It imports the product (`infergate`); the product never imports it, so
nothing here reaches the operator image or a `pip install infergate`.
"""
