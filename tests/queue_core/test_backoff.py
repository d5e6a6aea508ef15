"""The shared retry rhythm: doubling, capped, jittered, reset on success."""

from __future__ import annotations

from queue_core.backoff import Backoff


class BackoffTests:
    def test_doubles_from_base_within_half_to_full(self) -> None:
        backoff = Backoff(base=0.1, cap=100.0)
        for n in range(6):
            delay = backoff.failed()
            ceiling = 0.1 * 2**n
            assert ceiling / 2 <= delay <= ceiling

    def test_never_waits_past_the_cap(self) -> None:
        backoff = Backoff(base=0.5, cap=2.0)
        assert max(backoff.failed() for _ in range(200)) <= 2.0

    def test_jitter_spreads_a_fleet(self) -> None:
        delays = {Backoff(base=1.0, cap=10.0).failed() for _ in range(50)}
        assert len(delays) > 40

    def test_success_starts_over_and_says_how_long_it_failed(self) -> None:
        backoff = Backoff(base=1.0, cap=10.0)
        for _ in range(5):
            backoff.failed()
        assert backoff.succeeded() == 5
        assert backoff.failed() <= 1.0
