"""The collector: discovers the log files of live attempts, reads them and records what they say."""

from worker.collector.service import Collector, load_ruleset

__all__ = ["Collector", "load_ruleset"]
