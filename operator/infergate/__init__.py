"""infergate: roll out LLM inference engines behind a canary parity check."""

__version__ = "0.1.0"
