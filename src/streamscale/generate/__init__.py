"""Load generators for the seed pipelines: referential, purchases and game frames.

Record builders (:mod:`.referential`, :mod:`.purchases`, :mod:`.game_frames`) are pure and
driven by a seeded :class:`random.Random` (same seed and options, same records); rate
profiles are in :mod:`.profiles`; :mod:`.producer` is the only module that talks to Kafka.
"""

from __future__ import annotations

Record = tuple[str, str | None, str | None, int, bool]
"""One record to produce: ``(topic, key, value, timestamp_ms, counted)``.

``value`` None is a tombstone; ``timestamp_ms`` 0 lets the producer stamp the current time;
``counted`` records are the units of ``--count`` and ``--rate`` (a game frame's approval
is not counted: it rides along with its request).
"""
