# A real Gateway API implementation in front of the HTTPRoutes infergate writes
# (rollout.traffic.mode gateway): Traefik, built from its Go module, runs as a local process
# against the local cluster and load-balances to the revision Services' EndpointSlices.
#
#   make traefik        build Traefik (cached by version under $(INFERGATE_CACHE)/bin)
#   make test-gateway   requests through Traefik follow the route's weights while the
#                       operator steps a canary (fails, never skips, without the binary)
#
# The test is marked slow: `make test` deselects it (the first Traefik build takes about
# 7 minutes of a 2-core machine, more with a cold module cache), `make test-slow` builds
# Traefik and runs it.

TRAEFIK_VERSION ?= v3.6.12
TRAEFIK_BIN := $(INFERGATE_CACHE)/bin/traefik-$(TRAEFIK_VERSION)/traefik
export INFERGATE_TRAEFIK := $(TRAEFIK_BIN)

.PHONY: traefik test-gateway

$(TRAEFIK_BIN):
	TRAEFIK_VERSION=$(TRAEFIK_VERSION) hack/build-traefik.sh

traefik: $(TRAEFIK_BIN)

test-gateway: setup traefik
	INFERGATE_REQUIRE_GATEWAY=1 $(BIN)/pytest tests/integration/test_gateway_traefik.py -m slow

test-slow: traefik
test-slow: export INFERGATE_REQUIRE_GATEWAY := 1
