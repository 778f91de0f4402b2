"""What :func:`kameleon.sample` returns: the draws, their log densities, diagnostics and
warnings, and exports (ArviZ, GetDist, CSV)."""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kameleon.models import Diagnostics, EvidenceSummary

if TYPE_CHECKING:
    from kameleon.core.diagnostics.findings import Finding

__all__ = ["Result"]


def _optional(module: str, extra: str, what: str) -> Any:
    from importlib import import_module

    try:
        return import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the optional package {module!r}: pip install 'kameleon[{extra}]'"
        ) from exc


@dataclass(frozen=True, eq=False)
class Result:
    """A sampling run.

    Attributes
    ----------
    draws
        The post-warm-up draws, shape ``(chains, draws, dim)``.
    log_density
        The log density (as told) at each draw, shape ``(chains, draws)``.
    acceptance
        Each chain's acceptance rate after warm-up, shape ``(chains,)`` (NaN where
        unknown).
    param_names
        One name per dimension.
    diagnostics
        Per parameter mean, sd, MCSE, bulk and tail ESS, R-hat; per chain acceptance.
    warnings
        The convergence problems found (each also emitted as a
        :class:`~kameleon.core.diagnostics.findings.SamplingWarning` when the run ended).
    seed
        The seed of the run (drawn at random when none was given): the same seed gives
        the same draws.
    algorithm, warmup
        As run.
    session
        The session's id when the run went through a service, else ``None``.
    url
        The service's URL, or ``None`` in process.
    accepted
        Whether each draw's transition accepted its proposal, shape ``(chains, draws)``,
        or ``None`` when unknown.
    acceptance_probability
        Each draw's Metropolis-Hastings acceptance probability ``min(1, alpha)``, shape
        ``(chains, draws)`` (in process), or ``None``.
    sample_stats
        The sampler's per-transition statistics by name, each of shape ``(chains,
        draws)``: ``step_size`` for the gradient samplers, and for ``hmc`` and ``nuts``
        ``n_steps``, ``diverging`` and ``energy`` (and ``tree_depth`` for ``nuts``), as
        Stan records them; empty for the others. ``importance`` records ``log_weight``,
        each draw's weight against its own chain's proposal.
    log_weights
        For importance samples (``importance``), each draw's log weight against the
        mixture of every chain's proposal, shape ``(chains, draws)``: the weights of the
        evidence and of the weighted diagnostics, right where chains found different
        modes. ``None`` for a Markov chain's draws, which weigh the same (and when the
        draws include warm-up). See :attr:`weights` and :meth:`resample`.
    """

    draws: npt.NDArray[np.float64]
    log_density: npt.NDArray[np.float64]
    acceptance: npt.NDArray[np.float64]
    param_names: list[str]
    diagnostics: Diagnostics
    warnings: list[Finding] = field(default_factory=list)
    seed: int = 0
    algorithm: str = ""
    warmup: int = 0
    session: str | None = None
    url: str | None = None
    accepted: npt.NDArray[np.bool_] | None = None
    acceptance_probability: npt.NDArray[np.float64] | None = None
    sample_stats: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    log_weights: npt.NDArray[np.float64] | None = None

    @classmethod
    def from_session(
        cls,
        url: str,
        session: str,
        *,
        api_key: str | None = None,
        include_warmup: bool = False,
        retry_seconds: float = 10.0,
    ) -> Result:
        """The result of a session on a service as it stands (running, done, or
        interrupted): every page of its draws, its diagnostics and warnings."""
        from kameleon.client import Client
        from kameleon.remote import session_result

        with Client(url, api_key=api_key, retry_seconds=retry_seconds) as client:
            return session_result(client, session, include_warmup=include_warmup)

    @property
    def weights(self) -> npt.NDArray[np.float64]:
        """Each draw's normalised weight, shape ``(chains, draws)``, summing to 1: from
        :attr:`log_weights` for importance samples, equal for a Markov chain's."""
        shape = self.draws.shape[:2]
        if self.log_weights is None:
            return np.full(shape, 1.0 / max(1, shape[0] * shape[1]))
        lw = np.asarray(self.log_weights, dtype=np.float64)
        top = float(np.max(lw)) if lw.size else -np.inf
        if not np.isfinite(top):
            raise ValueError("every weight is zero: no draw landed where the density is positive")
        w = np.exp(lw - top)
        return w / w.sum()  # type: ignore[no-any-return]

    def resample(self, draws: int | None = None, *, seed: int = 0) -> npt.NDArray[np.float64]:
        """Equally weighted draws, shape ``(draws, dim)``: the draws resampled in
        proportion to :attr:`weights` (systematic resampling, whose noise is the least of
        the usual schemes; Douc and Cappe 2005), ``draws`` of them (default: the
        weights' effective sample size, rounded; a Markov chain's draws, all of them,
        in order). The same ``seed`` gives the same draws."""
        flat = self.draws.reshape(-1, self.dim)
        w = self.weights.reshape(-1)
        if self.log_weights is None and draws is None:
            return flat.copy()
        if draws is None:
            draws = max(1, round(1.0 / float(np.sum(w * w))))
        if draws < 1:
            raise ValueError(f"draws must be at least 1, not {draws}")
        u = (np.random.default_rng(seed).random() + np.arange(draws)) / draws
        cdf = np.cumsum(w)
        index = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), len(w) - 1)
        out: npt.NDArray[np.float64] = flat[index].copy()
        return out

    @property
    def chains(self) -> int:
        return int(self.draws.shape[0])

    @property
    def dim(self) -> int:
        return int(self.draws.shape[2])

    @property
    def r_hat(self) -> npt.NDArray[np.float64]:
        """Each parameter's rank-normalised split R-hat."""
        return np.array([p.r_hat for p in self.diagnostics.parameters])

    @property
    def ess_bulk(self) -> npt.NDArray[np.float64]:
        return np.array([p.ess_bulk for p in self.diagnostics.parameters])

    @property
    def ess_tail(self) -> npt.NDArray[np.float64]:
        return np.array([p.ess_tail for p in self.diagnostics.parameters])

    def __repr__(self) -> str:
        where = f", session={self.session!r}" if self.session else ""
        return (
            f"Result(algorithm={self.algorithm!r}, chains={self.chains}, "
            f"draws={self.draws.shape[1]}, dim={self.dim}, seed={self.seed}, "
            f"max_r_hat={self.diagnostics.max_r_hat:.4g}, warnings={len(self.warnings)}{where})"
        )

    def summary(self) -> str:
        """A table of the diagnostics, one line per parameter, and the warnings."""
        lines = [
            f"{'parameter':<16}{'mean':>11}{'sd':>11}{'mcse':>10}{'ess_bulk':>10}"
            f"{'ess_tail':>10}{'r_hat':>8}"
        ]
        for p in self.diagnostics.parameters:
            lines.append(
                f"{p.name[:15]:<16}{p.mean:>11.4g}{p.sd:>11.4g}{p.mcse_mean:>10.3g}"
                f"{p.ess_bulk:>10.0f}{p.ess_tail:>10.0f}{p.r_hat:>8.4f}"
            )
        ev = self.evidence
        if ev is not None and self.algorithm == "tempering":
            lines.append(
                f"log evidence {ev.log_evidence:.4f} +- {ev.standard_error:.4f} "
                f"(stepping stones, smallest stone ESS {ev.ess:.0f} of {ev.draws} draws)"
            )
        elif ev is not None and self.algorithm == "smc":
            lines.append(
                f"log evidence {ev.log_evidence:.4f} +- {ev.standard_error:.4f} "
                f"(sequential Monte Carlo, smallest stage ESS {ev.ess:.0f} particles)"
            )
        elif ev is not None:
            lines.append(
                f"log evidence {ev.log_evidence:.4f} +- {ev.standard_error:.4f} "
                f"(importance ESS {ev.ess:.0f} of {ev.draws} draws, Pareto k {ev.pareto_k:.2f})"
            )
        return "\n".join(lines + self.warning_lines())

    @property
    def evidence(self) -> EvidenceSummary | None:
        """For importance sampling (``algorithm="importance"``), the log evidence and its
        standard error, the weights' ESS and Pareto k; for parallel tempering
        (``algorithm="tempering"``), its stepping-stone log evidence, the chains' spread as
        its standard error (NaN with one chain), the smallest stone's ESS and a NaN Pareto
        k; for sequential Monte Carlo (``algorithm="smc"``), the chains' estimates from
        their stages, with the same standard error, the smallest stage's conditional ESS
        in particles and a NaN Pareto k; ``None`` for another Markov chain. The weighted draws' own log weights are
        ``sample_stats["log_weight"]``."""
        return self.diagnostics.evidence

    def warning_lines(self) -> list[str]:
        """The warnings grouped: one line per kind naming the parameters and chains it
        concerns, then one line of what to try."""
        from kameleon.core.diagnostics.findings import grouped_lines

        return grouped_lines(self.warnings)

    # -------------------------------------------------------------------- exports

    def to_arviz(self) -> Any:
        """An ``arviz.InferenceData`` with the draws as ``posterior``, and as
        ``sample_stats`` the log densities (``lp``), whether each transition accepted
        (``accepted``) and its acceptance probability (``acceptance_rate``, in process),
        when known, and the sampler's statistics under ArviZ's names (``step_size``,
        ``tree_depth``, ``n_steps``, ``diverging``, ``energy``: what ``az.bfmi`` and
        ``az.plot_energy`` read), and for importance samples their ``log_weight``
        (against their own chain's proposal) and ``mixture_log_weight``
        (:attr:`log_weights`, the ones to weigh them by); the run's seed, algorithm,
        warm-up, session and URL are the attributes (needs the ``arviz`` extra)."""
        az = _optional("arviz", "arviz", "to_arviz()")
        posterior = {name: self.draws[:, :, i] for i, name in enumerate(self.param_names)}
        stats: dict[str, Any] = {"lp": self.log_density}
        if self.accepted is not None and self.accepted.shape == self.log_density.shape:
            stats["accepted"] = self.accepted
        probability = self.acceptance_probability
        if probability is not None and probability.shape == self.log_density.shape:
            stats["acceptance_rate"] = probability
        for name, values in self.sample_stats.items():
            if values.shape == self.log_density.shape:
                stats[name] = values.astype(bool) if name == "diverging" else values
        if self.log_weights is not None and self.log_weights.shape == self.log_density.shape:
            stats["mixture_log_weight"] = self.log_weights
        attrs = {
            "inference_library": "kameleon",
            "algorithm": self.algorithm,
            "seed": self.seed,
            "warmup": self.warmup,
            "chains": self.chains,
        }
        if self.session is not None:
            attrs |= {"session": self.session, "url": self.url or ""}
        return az.from_dict(posterior=posterior, sample_stats=stats, attrs=attrs)

    def to_getdist(self, label: str | None = None) -> Any:
        """A ``getdist.MCSamples`` of the chains (needs the ``getdist`` extra); warm-up
        is already dropped. Importance samples carry their :attr:`weights`."""
        getdist = _optional("getdist", "getdist", "to_getdist()")
        return getdist.MCSamples(
            samples=[np.asarray(c) for c in self.draws],
            weights=None if self.log_weights is None else list(self._getdist_weights()),
            loglikes=[-np.asarray(lp) for lp in self.log_density],
            names=list(self.param_names),
            labels=list(self.param_names),
            label=label,
            sampler="mcmc",
            ignore_rows=0,
        )

    def _getdist_weights(self) -> npt.NDArray[np.float64]:
        """The draws' weights as GetDist reads them, shape ``(chains, draws)``: 1 for a
        Markov chain's, importance weights scaled so that the largest is 1."""
        if self.log_weights is None:
            return np.ones(self.draws.shape[:2])
        w = self.weights
        out: npt.NDArray[np.float64] = w / w.max()
        return out

    def save_getdist(self, root: str | os.PathLike[str]) -> list[Path]:
        """Write the chains as GetDist (and Cobaya) text chains: ``root_1.txt``,
        ``root_2.txt``, ... one per chain, each row ``weight  -log(posterior)
        parameters...`` (weight 1 for a Markov chain; for importance samples the draw's
        :attr:`weights`, scaled to a largest of 1; a ``#`` header naming the columns), and
        ``root.paramnames``, one ``name<TAB>label`` per parameter. Returns the paths
        written. ``getdist.loadMCSamples(root)`` reads them."""
        base = Path(root)
        base.parent.mkdir(parents=True, exist_ok=True)
        written = []
        header = "  ".join(["weight", "minuslogpost", *self.param_names])
        weights = self._getdist_weights()
        for c in range(self.chains):
            path = base.with_name(f"{base.name}_{c + 1}.txt")
            table = np.column_stack([weights[c], -self.log_density[c], self.draws[c]])
            np.savetxt(path, table, fmt="%.17g", delimiter="  ", header=header)
            written.append(path)
        names = base.with_name(base.name + ".paramnames")
        names.write_text("".join(f"{n}\t{n}\n" for n in self.param_names), encoding="utf-8")
        written.append(names)
        return written

    def to_csv(self, path: str | os.PathLike[str]) -> Path:
        """One row per draw: ``chain,draw,log_density,<parameters>`` with a header."""
        out = Path(path)
        with out.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            names = [_cell(n) for n in self.param_names]
            writer.writerow(["chain", "draw", "log_density", *names])
            for c in range(self.chains):
                for k in range(self.draws.shape[1]):
                    writer.writerow(
                        [c, k, _num(self.log_density[c, k]), *map(_num, self.draws[c, k])]
                    )
        return out


def _cell(name: str) -> str:
    """A name a spreadsheet will not read as a formula."""
    return "'" + name if name[:1] in ("=", "+", "-", "@") else name


def _num(value: float) -> str:
    return repr(float(value)) if math.isfinite(value) else str(float(value))
