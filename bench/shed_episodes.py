#!/usr/bin/env python3
"""The refusal episodes of overload_profile.py --timeline runs: for each run (a JSON line of its output),
one JSON line per episode, a stretch of timeline samples with refusals no more than --gap-ms apart:
when it began and ended (seconds into the run), the refusals in it by the rule that made them (the
scheduler's shed_arrival_* and shed_routed, shed_unprepared, and the loops' HEADERS-time count), the
stalls the loops saw in it (isn_scheduler_stalls_seen_total), and what admission believed of the
preparation queue just before it and at its worst (the largest predicted wait sampled in it): the
predicted wait, the queue's stillness, its measured time between departures and its depth. It tells which
term of the preparations bound refused in an episode after a stall (the stillness, the departures' pace,
or the depth), beside the generator's on_time_timeline.

  shed_episodes.py [--gap-ms MS] PROFILE.json ...
"""
import argparse, json, re, sys

REASON = re.compile(r"^isn_scheduler_(shed_arrival_\w+|shed_routed|shed_unprepared)_total$")
BELIEF = {"predicted_wait_s": "isn_scheduler_prepare_predicted_wait_seconds",
          "still_s": "isn_scheduler_prepare_still_seconds",
          "departure_s": "isn_scheduler_prepare_departure_seconds",
          "depth": "isn_scheduler_prepare_queue_depth"}


def refusals_of(sample):
    """A timeline sample's refusals by rule, and the loops' HEADERS-time count among them."""
    by_rule = {}
    for name, value in sample.items():
        m = REASON.match(name)
        if m and isinstance(value, (int, float)) and value:
            by_rule[m.group(1)] = by_rule.get(m.group(1), 0) + int(value)
    return by_rule, int(sample.get("isn_shed_at_headers_total", 0) or 0)


def belief_of(state):
    return {key: state.get(name) for key, name in BELIEF.items()} if state else None


def episodes_of(timeline, gap_s):
    """Stretches of samples with refusals, at most gap_s apart, as JSON-ready dicts. The timeline holds
    only the samples in which a watched counter moved. A stall the loops saw within gap_s before an
    episode's first refusal, or inside it, is the episode's."""
    out, current, stall_before = [], None, None  # stall_before: (t, count) of the latest refusal-free stall
    for sample in timeline:
        by_rule, at_headers = refusals_of(sample)
        stalls = int(sample.get("isn_scheduler_stalls_seen_total", 0) or 0)
        if not by_rule:
            if stalls and current is not None and sample["t"] - current["end_s"] <= gap_s:
                current["stalls_seen"] += stalls
            elif stalls:  # a chain of stalls, each within gap_s of the next, joins as one
                chained = stall_before and sample["t"] - stall_before[0] <= gap_s
                stall_before = (sample["t"], stalls + (stall_before[1] if chained else 0))
            continue
        if current is None or sample["t"] - current["end_s"] > gap_s:
            current = {"start_s": sample["t"], "end_s": sample["t"], "refused": {}, "at_headers": 0,
                       "stalls_seen": 0, "before": belief_of(sample.get("state_before")), "worst": None}
            if stall_before and sample["t"] - stall_before[0] <= gap_s:
                current["stalls_seen"] += stall_before[1]
            stall_before = None
            out.append(current)
        current["end_s"] = sample["t"]
        for rule, count in by_rule.items():
            current["refused"][rule] = current["refused"].get(rule, 0) + count
        current["at_headers"] += at_headers
        current["stalls_seen"] += stalls
        seen = belief_of(sample.get("state"))
        if seen and (current["worst"] is None or
                     (seen["predicted_wait_s"] or 0) > (current["worst"]["predicted_wait_s"] or 0)):
            current["worst"] = seen
    return out


def runs_in(path):
    """The runs of a profile file: JSON objects one after another (a line each, as overload_profile.py
    writes them, or spread over lines)."""
    with open(path) as f:
        text = f.read()
    decoder, at = json.JSONDecoder(), 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return
        try:
            run, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as e:
            sys.exit(f"shed_episodes: {path}: not a profile's JSON: {e}")
        yield run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gap-ms", type=float, default=30.0,
                        help="the longest time without refusals inside an episode (default 30)")
    parser.add_argument("profiles", nargs="+")
    args = parser.parse_args()
    for path in args.profiles:
        for run in runs_in(path):
            timeline = run.get("timeline")
            if timeline is None:
                sys.exit(f"shed_episodes: {path}: a run without a timeline (overload_profile.py --timeline MS)")
            for episode in episodes_of(timeline, args.gap_ms / 1e3):
                print(json.dumps({"label": run.get("label"), **episode}))


if __name__ == "__main__":
    main()
