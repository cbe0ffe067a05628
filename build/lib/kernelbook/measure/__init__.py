"""Check every size against its reference, then time it beside the baselines; the stopping
rule; the device's ceilings."""
