"""The probe's clocks event (throttle) reason table (probe/health.py CLOCK_EVENT_BITS) against the
installed pynvml."""

from __future__ import annotations

from gputopo.probe.health import clock_event_names


def test_every_clock_event_bit_pynvml_defines_has_a_name():
    """The table names every nvmlClocksEventReason*/nvmlClocksThrottleReason* bit of the installed
    pynvml (aliases, None and All aside), so no reason a driver sets shows as hex."""
    import pynvml

    from gputopo.probe.health import CLOCK_EVENT_BITS
    bits = {name: getattr(pynvml, name) for name in dir(pynvml)
            if name.startswith(("nvmlClocksEventReason", "nvmlClocksThrottleReason"))
            and not name.endswith(("None", "All"))}
    assert bits["nvmlClocksThrottleReasonBoardLimit"] == 0x200  # a bit the table once lacked
    for name, bit in bits.items():
        assert bit in CLOCK_EVENT_BITS, f"{name} = {bit:#x} has no name"
    everything = pynvml.nvmlClocksThrottleReasonAll | pynvml.nvmlClocksEventReasonAll
    assert not [n for n in clock_event_names(everything) if n.startswith("0x")]
    assert clock_event_names(0x600) == ["board_limit", "reliability"]
