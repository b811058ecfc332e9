"""One campaign, from a request to its report: the design (arms, slots, rounds), the typed context and request set-up,
the assembly of runners, the cold and warm runners, the sequential rule, the run record, and the single-purpose
campaigns built on them (BCG replay, profiling, readiness)."""
