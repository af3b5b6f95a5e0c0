"""``adaptive-spec loadgen``: a load generator for OpenAI-compatible servers, measured as
``vllm bench serve`` measures (TTFT, TPOT, ITL, E2EL percentiles, throughput, goodput, acceptance).

- ``arrivals``  when requests come (Poisson or Gamma gaps) and the schedule of traffic-mix shifts
- ``client``    one streamed request, timed; the server's checks and spec-decode counters
- ``stats``     percentiles, goodput, acceptance from counters
- ``run``       the run itself: arrivals, concurrency, stop conditions
- ``report``    the printed tables and the JSON file (its format is documented there)
- ``cli``       the command

Nothing here imports torch or transformers: a load generator runs on any client machine.
"""
