# Golden records: the S3-compatible server their tests run against, and the tests.
#
#   make s3-server     build Versity S3 Gateway from its Go module (cached by version)
#   make test-golden   unit tests of the record store and layer localisation, then the
#                      store against a real S3 server on 127.0.0.1 (no cluster needed)

VERSITYGW_VERSION ?= v1.8.0
S3_SERVER_BIN := $(INFERGATE_CACHE)/bin/versitygw-$(VERSITYGW_VERSION)/versitygw
export INFERGATE_S3_SERVER := $(S3_SERVER_BIN)

.PHONY: s3-server test-golden

$(S3_SERVER_BIN):
	VERSITYGW_VERSION=$(VERSITYGW_VERSION) hack/build-s3.sh

s3-server: $(S3_SERVER_BIN)

# make test (and test-slow) run the store's S3 tests too, and fail (never skip) without the server.
test test-slow: s3-server

test-golden: venv s3-server
	INFERGATE_REQUIRE_S3=1 $(BIN)/pytest tests/unit/golden tests/unit/parity/test_layers.py \
		tests/unit/runtime/test_layer_states.py tests/integration/test_golden_s3.py
