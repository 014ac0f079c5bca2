"""ferry's metrics as a prometheus_client collector.

    import ferry, ferry.prometheus
    from prometheus_client import REGISTRY, start_http_server
    ctx = ferry.Context(provider="tcp;ofi_rxm", progress_thread=True)
    REGISTRY.register(ferry.prometheus.FerryCollector(
        ctx, labels={"role": "decode"}))
    start_http_server(9400)   # GET http://HOST:9400/metrics

Each scrape reads every context's Context.metrics_text() (ferry's
Prometheus text, ferry_metrics_text) and hands its families to
prometheus_client, so they come out beside the application's own metrics
under the names ferry gave them.  Only this module needs prometheus_client
(Debian: python3-prometheus-client; pip: prometheus-client); `import
ferry` does not.  See docs/python.md, "Metrics".
"""
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional

try:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:  # only this module needs it: say how to get it
    raise ImportError(
        "ferry.prometheus needs the prometheus_client package (%s): install "
        "python3-prometheus-client (apt-get install "
        "python3-prometheus-client) or prometheus-client (pip install "
        "prometheus-client); the rest of ferry works without it" % e,
        name=e.name, path=e.path) from e

import ferry

__all__ = ["FerryCollector"]

# Prometheus' rule for a label name; "__" starts the server's own.
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# Labels the exposition gives a meaning of its own (histogram buckets,
# summary quantiles): a constant label of that name would break them.
_RESERVED = ("le", "quantile")


class FerryCollector:
    """FerryCollector(*contexts, labels=None): a prometheus_client
    collector of the metrics of one or more ferry.Context.

    labels: constant labels (name: value) added to every sample, such as
    {"role": "decode"}.  With several contexts, the samples of each carry
    a label context="0", "1"... (their order here), and families of one
    name are merged into one.  A context closed since is left out of the
    scrapes.  The collector holds the contexts: unregister it when they
    are done with (registry.unregister(collector)).
    """

    def __init__(self, *contexts: Any,
                 labels: Optional[Mapping[str, Any]] = None) -> None:
        if not contexts:
            raise TypeError("FerryCollector: give the ferry.Context (or "
                            "several) whose metrics to collect")
        for ctx in contexts:
            if not callable(getattr(ctx, "metrics_text", None)):
                raise TypeError("FerryCollector: %r is not a ferry.Context "
                                "(it has no metrics_text())" % (ctx,))
        own = {}
        for name, value in dict(labels or {}).items():
            if not isinstance(name, str) or not _LABEL_NAME.match(name) \
                    or name.startswith("__"):
                raise ValueError("FerryCollector: label name %r is not a "
                                 "Prometheus label name ([a-zA-Z_]"
                                 "[a-zA-Z0-9_]*, not starting with __)"
                                 % (name,))
            if name in _RESERVED or (name == "context" and len(contexts) > 1):
                raise ValueError("FerryCollector: label %r is the "
                                 "exposition's own%s; choose another name"
                                 % (name, " (which context)"
                                    if name == "context" else ""))
            own[name] = str(value)
        self._contexts = tuple(contexts)
        self._labels = own

    def __repr__(self) -> str:
        return "FerryCollector(%d context%s, labels=%r)" % (
            len(self._contexts), "" if len(self._contexts) == 1 else "s",
            self._labels)

    @staticmethod
    def _text(ctx: Any) -> Optional[str]:
        """ctx's metrics, or None once it is closed: a closed context has
        none, and failing the scrape would hide every other metric of
        the process."""
        if getattr(ctx, "closed", False):
            return None
        try:
            return ctx.metrics_text()
        except ferry.HandleError:
            if getattr(ctx, "closed", False):  # closed since the look
                return None
            raise

    def collect(self) -> Iterator[Metric]:
        """The families of every context, merged by name, in the order
        ferry writes them."""
        families: Dict[str, Metric] = {}
        several = len(self._contexts) > 1
        for i, ctx in enumerate(self._contexts):
            text = self._text(ctx)
            if text is None:
                continue
            extra = dict(self._labels)
            if several:
                extra["context"] = str(i)
            # The parser stores a counter as OpenMetrics does: the family
            # named without _total, its samples with it.  Kept so, the
            # family renders back (generate_latest) as ferry wrote it.
            for fam in text_string_to_metric_families(text):
                out = families.get(fam.name)
                if out is None:
                    out = families[fam.name] = Metric(
                        fam.name, fam.documentation, fam.type, fam.unit)
                elif out.type != fam.type:
                    raise ValueError(
                        "FerryCollector: family %s is a %s in context 0 "
                        "and a %s in context %d (ferry versions differ?)"
                        % (fam.name, out.type, fam.type, i))
                for sample in fam.samples:
                    clash = sorted(extra.keys() & sample.labels.keys())
                    if clash:
                        raise ValueError(
                            "FerryCollector: label %s of labels= is also "
                            "ferry's, in %s; choose another name"
                            % (", ".join(clash), sample.name))
                    out.samples.append(sample._replace(
                        labels={**sample.labels, **extra}))
        yield from families.values()

    def describe(self) -> List[Metric]:
        """The families' names, for the registry's check that no two
        collectors give one name (register() calls it): those of a
        scrape, which also proves labels= clashes with none of ferry's."""
        return [Metric(m.name, m.documentation, m.type, m.unit)
                for m in self.collect()]
