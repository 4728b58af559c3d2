"""What ``pip check`` would say about otel-handoff and the installed frameworks, for ``doctor``.

pip installs one package at a time: a framework whose requirements clash with another's is
installed with a resolver ERROR, exit status 0, and an environment where one of them is broken
(google-adk caps ``opentelemetry-sdk`` below what livekit-agents 1.8 needs). This walks the
requirements of otel-handoff and of each installed framework's distribution, down their
dependency trees, with :mod:`importlib.metadata` and :mod:`packaging` (pip's own check is not a
public API), and names each requirement the installed distributions do not meet, with the
requirement on the other side when another framework's tree holds the version there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from importlib.metadata import Distribution, distributions

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..core.frameworks import FRAMEWORKS, Framework

OWN = "otel-handoff"


@dataclass(frozen=True)
class Need:
    """One requirement of one installed distribution, and which roots' trees reach it."""

    requirer: str  # "livekit-agents 1.8.9"
    requirement: Requirement
    roots: frozenset[str]  # framework keys, or OWN

    @property
    def wanted(self) -> str:
        """The requirement without its marker: what ``pip install`` is given."""
        extras = f"[{','.join(sorted(self.requirement.extras))}]" if self.requirement.extras else ""
        return f"{self.requirement.name}{extras}{self.requirement.specifier}"


@dataclass
class Unmet:
    """A requirement not met here: its package is missing (``installed`` None) or at another version."""

    need: Need
    installed: str | None
    held_by: list[Need] = field(default_factory=list)  # what keeps the installed version there
    by_framework: list[Need] = field(default_factory=list)  # of those, a framework's own pins

    @property
    def frameworks(self) -> tuple[list[Framework], list[Framework]]:
        """(this side's frameworks, the other side's) when another framework's own distribution
        pins the installed version (google-adk's cap): one environment each is the fix. A pin deeper
        in a tree (``opentelemetry-exporter-otlp`` moving with the SDK) is not a side."""
        ours = set(self.need.roots)
        theirs = {root for need in self.by_framework for root in need.roots} - ours - {OWN}
        return (
            [f for f in FRAMEWORKS if f.key in ours],
            [f for f in FRAMEWORKS if f.key in theirs],
        )


@dataclass
class Check:
    """What was walked, from where, and what it found unmet."""

    roots: list[str]  # "livekit-agents 1.8.9", ...
    checked: int  # distributions walked
    unmet: list[Unmet]


def _installed() -> dict[str, Distribution]:
    """Every installed distribution by canonical name; the first on ``sys.path`` wins, as for imports."""
    found: dict[str, Distribution] = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist)
    return found


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def _meets(requirement: Requirement, version: str) -> bool:
    """Whether ``version`` meets ``requirement``; a version packaging cannot read is let pass."""
    try:
        return requirement.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True


def check() -> Check:
    """Walk otel-handoff's and every installed framework's requirements, transitively."""
    installed = _installed()
    roots: dict[str, str] = {}  # canonical distribution -> root (framework key, or OWN)
    if canonicalize_name(OWN) in installed:
        roots[canonicalize_name(OWN)] = OWN
    for framework in FRAMEWORKS:
        for name in framework.distributions:
            if canonicalize_name(name) in installed:
                roots.setdefault(canonicalize_name(name), framework.key)
    needs: dict[tuple[str, str], set[str]] = {}  # (requirer, requirement) -> roots reaching it
    parsed: dict[str, Requirement] = {}
    walked: set[str] = set()
    for start, root in roots.items():
        queue: deque[tuple[str, frozenset[str]]] = deque([(start, frozenset())])
        seen: set[tuple[str, frozenset[str]]] = set()
        while queue:
            name, extras = queue.popleft()
            if (name, extras) in seen or name not in installed:
                continue
            seen.add((name, extras))
            walked.add(name)
            dist = installed[name]
            requirer = f"{dist.metadata['Name']} {dist.version}"
            for line in dist.requires or []:
                try:
                    requirement = Requirement(line)
                except InvalidRequirement:
                    continue
                if not _applies(requirement, extras):
                    continue
                parsed.setdefault(str(requirement), requirement)
                needs.setdefault((requirer, str(requirement)), set()).add(root)
                queue.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    every = [Need(requirer, parsed[text], frozenset(reached)) for (requirer, text), reached in needs.items()]
    labels = [f"{installed[name].metadata['Name']} {installed[name].version}" for name in roots]
    unmet = []
    for need in every:
        there = installed.get(canonicalize_name(need.requirement.name))
        if there is None:
            unmet.append(Unmet(need, None))
        elif not _meets(need.requirement, there.version):
            held = _holders(need, there.version, every)
            unmet.append(Unmet(need, there.version, held, [h for h in held if h.requirer in labels]))
    return Check(labels, len(walked), unmet)


def _holders(need: Need, installed: str, every: list[Need]) -> list[Need]:
    """The other requirements on the same package that the installed version meets and that rule
    out every version ``need`` names and accepts: why pip left the installed version there."""
    package = canonicalize_name(need.requirement.name)
    candidates = []
    for spec in need.requirement.specifier:
        try:
            Version(spec.version)  # not a wildcard (==1.2.*) or an arbitrary string (===)
        except InvalidVersion:
            continue
        if _meets(need.requirement, spec.version):
            candidates.append(spec.version)
    return [
        other
        for other in every
        if other.requirer != need.requirer
        and canonicalize_name(other.requirement.name) == package
        and _meets(other.requirement, installed)
        and candidates
        and not any(_meets(other.requirement, version) for version in candidates)
    ]
