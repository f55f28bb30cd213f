"""The mirroring proxy: shadow parity on live requests, never on the client's path.

`infergate mirror serve` runs in front of an InferenceDeployment's stable Service:

- `proxy`: every client request is forwarded to a ready endpoint of the stable Service
  and the answer streamed back as it comes, untouched;
- `sampling`: only while a shadow session runs, a finished exchange may be copied, at a
  sampled share, under a token-bucket rate and into a bounded queue; a copy that does
  not fit is dropped (counted), never waited for;
- `capture`: what a copy keeps of an exchange (the prompt, the answer's text, the
  sampling parameters), parsed from the request and the (possibly streamed) answer;
- `scoring`: a worker scores each copy teacher-forced on both sides (the stable's
  answer under stable and under the canary, vLLM `prompt_logprobs`), and greedy
  requests also as the canary's own greedy answer;
- `session`: the scored pairs are kept (bounded) for the runner, which compares the
  pairs of every mirror pod in one comparison;
- `pairs`: how a scored pair travels to the runner: token ids and scores, never the
  prompt's or the answer's text.
"""
