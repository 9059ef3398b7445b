"""Apply a unified diff to an installed package's source, record it, and revert it afterwards.

The investigation enabled FlashInfer's CUTLASS MoE autotune by editing SGLang's
``model_runner.py`` (SGLang skipped the autotune for that MoE backend). A notebook that tests
such a change must leave the installation as it found it, so a :class:`SourcePatch`:

- finds the package's installed folder without importing it;
- checks with a dry run that the diff applies cleanly (context matching exactly, no fuzz; line
  offsets between releases are allowed; not already applied), and refuses otherwise with GNU patch's own words;
- keeps a copy of every file it changes and writes ``patch.json`` plus the diff itself into the
  run folder, so the report shows exactly what was changed in which version;
- reverts (``patch -R``, or the saved copies when that fails), also at interpreter exit if a
  notebook stops half-way, and on SIGTERM or SIGHUP before the process ends; a patch left
  applied by a process killed outright (SIGKILL) is found by its marker file beside the package
  and reverted, with a warning, the next time the same diff is applied.

Diffs use ``a/``/``b/`` prefixes relative to the folder that *holds* the package (site-packages),
e.g. ``--- a/sglang/srt/model_executor/model_runner.py``, as ``git diff`` writes them.
Shipped diffs live in ``data/patches/``; :func:`shipped_patch` finds one by name.

Releases move code and take changes upstream. Where a diff does not apply, the check looks for
its hunks in the whole package: when the added lines are already there (with most of their
context, and without the removed ones) the record says the change is upstream, in which
release and file, and :meth:`SourcePatch.apply` goes on without changing anything (status
``"upstream"``); when the original code is found in another file, the error says where it went.

On the stand-in (backend ``sim``) nothing is installed to patch: the stand-in models the autotune
as a profile setting, and :func:`record_modelled` writes the same record with status
``"modelled"`` so the report says the patch was modelled, not applied.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from glm5lib import engines, rundir
from glm5lib.errors import ConfigError, PatchError
from glm5lib.paths import data_dir
from glm5lib.server.process import at_termination

__all__ = [
    "PATCH_RECORD",
    "PatchRecord",
    "SourcePatch",
    "package_root",
    "patched_files",
    "record_modelled",
    "shipped_patch",
    "shipped_patches",
]

log = logging.getLogger(__name__)

#: File name of the patch record written into the run folder (a phase folder).
PATCH_RECORD = rundir.PATCH_RECORD

_TARGET_RE = re.compile(r"^\+\+\+ (\S+)")


@dataclass
class PatchRecord:
    """What was patched, where, and what became of it; saved as ``patch.json``."""

    name: str
    package: str
    package_version: str | None
    root: str | None
    files: list[str]
    diff_sha256: str
    status: str  # "checked" | "applied" | "reverted" | "modelled" | "upstream" | "failed"
    note: str = ""
    checked_at: str | None = None
    applied_at: str | None = None
    reverted_at: str | None = None
    dry_run_output: str = ""
    file_sha256_before: dict[str, str] = field(default_factory=dict)
    file_sha256_after: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def default_package() -> str:
    """The package a patch edits where none is named: the default engine's server package."""
    program = engines.get(engines.DEFAULT_ENGINE).program
    if program is None or not program.requires_package:
        raise ConfigError(f"engine {engines.DEFAULT_ENGINE!r} runs no installed package to patch; name one",
                          field="package")
    return program.requires_package


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def shipped_patches() -> list[str]:
    """Names of the diffs shipped in ``data/patches/`` (without ``.diff``)."""
    folder = data_dir() / "patches"
    return sorted(p.stem for p in folder.glob("*.diff")) if folder.is_dir() else []


def shipped_patch(name: str) -> Path:
    """Path of a shipped diff by name (``data/patches/<name>.diff``) or an existing file path."""
    candidate = Path(name).expanduser()
    if candidate.suffix == ".diff" and candidate.is_file():
        return candidate
    path = data_dir() / "patches" / f"{Path(name).stem}.diff"
    if not path.is_file():
        raise ConfigError(
            f"no patch named {name!r}: pass a .diff file path or one of {shipped_patches()}",
            field="patch",
            valid=shipped_patches(),
        )
    return path


def package_root(package: str) -> Path:
    """The folder holding an installed package (its site-packages), found without importing it."""
    top = package.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise PatchError(f"cannot locate package {top!r}: {exc}") from exc
    if spec is None:
        raise PatchError(
            f"package {top!r} is not installed in this environment, so there is nothing to patch "
            f"(install it, or on the stand-in record the patch as modelled)"
        )
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve().parent
    if spec.origin:
        return Path(spec.origin).resolve().parent
    raise PatchError(f"package {top!r} has no files on disk to patch (namespace or built-in)")


def patched_files(diff: str) -> list[str]:
    """Files a unified diff changes, relative to the package root (``a/``/``b/`` stripped)."""
    files = []
    for line in diff.splitlines():
        match = _TARGET_RE.match(line)
        if not match or match.group(1) == "/dev/null":
            continue
        target = match.group(1)
        parts = Path(target).parts
        rel = Path(*parts[1:]) if len(parts) > 1 and parts[0] in ("a", "b") else Path(target)
        if rel.is_absolute() or ".." in rel.parts:
            raise PatchError(f"the diff targets {target!r}, outside the package folder; refusing")
        files.append(rel.as_posix())
    if not files:
        raise PatchError("the text is not a unified diff: it has no '+++ b/<file>' line")
    return files


def _hunks(diff: str) -> list[tuple[list[str], list[str], list[str]]]:
    """(context, removed, added) lines of each hunk, stripped, blank lines left out."""
    hunks: list[tuple[list[str], list[str], list[str]]] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            hunks.append(([], [], []))
        elif hunks and line[:1] in (" ", "-", "+") and not line.startswith(("---", "+++")):
            text = line[1:].strip()
            if text:
                hunks[-1][" -+".index(line[0])].append(text)
    return hunks


def _best_window(lines: list[str], wanted: list[str], absent: list[str], span: int = 12) -> tuple[int, int]:
    """(matches, line number) of the window of ``lines`` holding most of ``wanted`` and none of ``absent``."""
    best = (0, 0)
    stripped = [ln.strip() for ln in lines]
    anchors = [i for i, ln in enumerate(stripped) if ln == wanted[-1]] if wanted else []
    for i in anchors:
        window = stripped[max(0, i - span) : i + span]
        if any(a in window for a in absent):
            continue
        score = sum(1 for w in set(wanted) if w in window)
        if score > best[0]:
            best = (score, i + 1)
    return best


def locate(diff: str, root: Path, package: str | None = None) -> dict[str, tuple[str, int]]:
    """Where a diff's change already is (``"upstream"``) or its original code went (``"moved"``).

    Searches every ``.py`` of ``package`` under ``root`` for each hunk: ``upstream`` needs the
    added lines with most of the context and none of the removed lines near them; ``moved``
    needs the removed lines with most of the context. Values are (path relative to root, line).
    """
    hunks = _hunks(diff)
    if not hunks:
        return {}
    package = package or default_package()
    files = sorted((root / package.split(".")[0]).rglob("*.py"))
    found: dict[str, tuple[str, int]] = {}
    for kind in ("upstream", "moved"):
        places = []
        for context, removed, added in hunks:
            changed, absent = (added, removed) if kind == "upstream" else (removed, added)
            if not changed:
                continue
            wanted = context + changed
            best: tuple[int, int, str] = (0, 0, "")
            for path in files:
                try:
                    text = path.read_text(errors="replace")
                except OSError:
                    continue
                if changed[-1] not in text:
                    continue
                score, line = _best_window(text.splitlines(), context + changed, absent)
                if score > best[0]:
                    best = (score, line, path.relative_to(root).as_posix())
            if best[0] * 2 <= len(set(wanted)):
                break
            places.append((best[2], best[1]))
        else:
            if places:
                found[kind] = places[0]
    return found


def installed_version(root: Path, package: str | None = None) -> str | None:
    """The version of ``package`` installed in the site-packages folder ``root`` (from its dist-info)."""
    top = (package or default_package()).split(".")[0]
    for info in sorted(root.glob(f"{top}-*.dist-info")):
        return info.name[len(top) + 1 : -len(".dist-info")]
    return None


def _patch_binary() -> str:
    exe = shutil.which("patch")
    if exe is None:
        raise PatchError("GNU patch is not installed here; install it (e.g. apt-get install patch)")
    return exe


class SourcePatch:
    """A unified diff to apply to an installed package, checked first and reverted afterwards.

    Use as a context manager, or call :meth:`check`, :meth:`apply` and :meth:`revert` from
    separate notebook cells. ``root`` overrides the package's installed folder (tests, or a
    source checkout); ``record_dir`` is where ``patch.json``, the diff and the saved originals go.
    """

    def __init__(
        self,
        diff: str | Path,
        package: str | None = None,
        *,
        root: str | Path | None = None,
        record_dir: str | Path | None = None,
        name: str | None = None,
    ):
        if isinstance(diff, Path) or (isinstance(diff, str) and "\n" not in diff):
            path = shipped_patch(str(diff))
            self.diff = path.read_text()
            self.name = name or path.stem
        else:
            self.diff = diff
            self.name = name or "patch"
        package = package or default_package()
        self.package = package
        self.files = patched_files(self.diff)
        self.root = Path(root).resolve() if root is not None else package_root(package)
        self.record_dir = Path(record_dir) if record_dir is not None else None
        version = installed_version(self.root, package)
        if version is None and root is None:
            try:
                version = importlib.metadata.version(package.split(".")[0])
            except importlib.metadata.PackageNotFoundError:
                version = None
        self.record = PatchRecord(
            name=self.name,
            package=package,
            package_version=version,
            root=str(self.root),
            files=self.files,
            diff_sha256=_sha256(self.diff.encode()),
            status="new",
        )
        self._backup: dict[str, bytes] = {}
        self._atexit_registered = False
        self._untrap = None  # unregisters the revert on SIGTERM/SIGHUP
        # Says who applied the diff until it is reverted, so that a run killed before it could
        # revert is found and undone by the next one.
        self._marker = self.root / f".glm5lib-patch-{self.name}.json"

    # -- the GNU patch calls ------------------------------------------------------------------
    def _run(self, *extra: str) -> subprocess.CompletedProcess:
        argv = [_patch_binary(), "-p1", "--batch", "--forward", "--fuzz=0", "--no-backup-if-mismatch",
                "-d", str(self.root), *extra]
        if "-R" in extra:
            argv.remove("--forward")
        return subprocess.run(argv, input=self.diff, capture_output=True, text=True, check=False)

    def _hashes(self) -> dict[str, str]:
        out = {}
        for rel in self.files:
            path = self.root / rel
            out[rel] = _sha256(path.read_bytes()) if path.exists() else ""
        return out

    @property
    def applied(self) -> bool:
        return self.record.status == "applied"

    @property
    def upstream(self) -> bool:
        """Whether the check found the change already in the installed release."""
        return self.record.status == "upstream"

    def _not_applicable(self, why: str) -> str:
        """The diff does not apply: say upstream (and go on) or where the code went (and raise)."""
        release = self.record.package_version or "this release"
        found = locate(self.diff, self.root, self.package)
        if "upstream" in found:
            where, line = found["upstream"]
            self.record.status = "upstream"
            self.record.note = f"already upstream in {self.package} {release}: {where}:{line}"
            self.record.checked_at = _now()
            log.info("%s: %s; nothing to apply", self.name, self.record.note)
            self._write_record()
            return self.record.note
        if "moved" in found and found["moved"][0] not in self.files:
            where, line = found["moved"]
            raise PatchError(
                f"{self.name}: in {self.package} {release} the code this diff changes moved to "
                f"{where}:{line}; the diff targets {', '.join(self.files)} and needs updating ({why})"
            )
        raise PatchError(
            f"{self.name} does not apply cleanly to {self.package} {release} at {self.root}, and "
            f"neither the change nor the code it changes is elsewhere in the package; the diff was "
            f"written for another version:\n{why}"
        )

    def check(self) -> str:
        """Dry run: return patch's output when the diff applies cleanly, or a note when the
        change is already upstream (status ``"upstream"``); raise :class:`PatchError` otherwise."""
        missing = [rel for rel in self.files if not (self.root / rel).exists()]
        if missing:
            return self._not_applicable(f"{self.package} at {self.root} has no {', '.join(missing)}")
        result = self._run("--dry-run")
        output = (result.stdout + result.stderr).strip()
        self.record.dry_run_output = output
        self.record.checked_at = _now()
        if result.returncode != 0:
            reverse = self._run("--dry-run", "-R")
            if reverse.returncode == 0:
                if self._revert_leftover():
                    return self.check()
                raise PatchError(
                    f"{self.name} is already applied to {self.package} at {self.root}; "
                    f"revert it first (patch -R) or leave it as it is"
                )
            return self._not_applicable(output or "GNU patch failed")
        if "fuzz" in output:
            raise PatchError(f"{self.name} applies only with fuzz, refusing to guess:\n{output}")
        if "offset" in output:
            # context matched exactly, only line numbers moved between releases
            log.info("%s applies at an offset: %s", self.name, output)
        self.record.status = "checked"
        return output

    def apply(self) -> PatchRecord:
        """Check, save the originals, apply, and write the record; returns the record."""
        if self.applied:
            return self.record
        self.check()
        if self.upstream:
            return self.record
        for rel in self.files:
            path = self.root / rel
            if not path.stat().st_mode & 0o200:
                raise PatchError(f"{path} is not writable; run as the owner of the installation")
            self._backup[rel] = path.read_bytes()
        self.record.file_sha256_before = self._hashes()
        process = psutil.Process()
        self._marker.write_text(json.dumps({"diff_sha256": self.record.diff_sha256, "pid": process.pid,
                                            "started": process.create_time(), "applied_at": _now()}))
        result = self._run()
        if result.returncode != 0:
            self._marker.unlink(missing_ok=True)
            self._restore()
            self.record.status = "failed"
            self._write_record()
            raise PatchError(
                f"{self.name} failed to apply after a clean dry run; originals restored:\n"
                f"{(result.stdout + result.stderr).strip()}"
            )
        self.record.file_sha256_after = self._hashes()
        self.record.status = "applied"
        self.record.applied_at = _now()
        log.info("applied %s to %s (%s)", self.name, self.root, ", ".join(self.files))
        if not self._atexit_registered:
            atexit.register(self._revert_at_exit)
            self._atexit_registered = True
        self._untrap = self._untrap or at_termination(self._revert_at_exit)
        self._write_record()
        return self.record

    def revert(self) -> PatchRecord:
        """Undo :meth:`apply` (``patch -R``, else the saved originals); no-op when not applied."""
        if not self.applied:
            return self.record
        result = self._run("-R")
        if result.returncode != 0 or self._hashes() != self.record.file_sha256_before:
            log.warning("patch -R did not restore %s cleanly; restoring saved copies", self.name)
            self._restore()
        if self._hashes() != self.record.file_sha256_before:
            self.record.status = "failed"
            self._write_record()
            raise PatchError(f"could not revert {self.name} in {self.root}; reinstall {self.package}")
        self._marker.unlink(missing_ok=True)
        if self._untrap is not None:
            self._untrap()
            self._untrap = None
        self.record.status = "reverted"
        self.record.reverted_at = _now()
        log.info("reverted %s in %s", self.name, self.root)
        self._write_record()
        return self.record

    def _revert_leftover(self) -> bool:
        """Revert this diff where the marker says a process that has since ended applied it."""
        try:
            left = json.loads(self._marker.read_text())
            owner = psutil.Process(left["pid"])
            if owner.create_time() == left["started"] and owner.is_running():
                return False  # applied by a process still running: it reverts its own
        except psutil.NoSuchProcess:
            pass
        except (OSError, ValueError, KeyError, TypeError, psutil.Error):
            return False
        if left.get("diff_sha256") != self.record.diff_sha256 or self._run("-R").returncode != 0:
            return False
        self._marker.unlink(missing_ok=True)
        self.record.note = (f"reverted a leftover: {self.name} was still applied by pid {left['pid']} "
                            f"(applied {left.get('applied_at')}), which ended without reverting it")
        log.warning("%s in %s", self.record.note, self.root)
        return True

    def _restore(self) -> None:
        for rel, data in self._backup.items():
            (self.root / rel).write_bytes(data)

    def _revert_at_exit(self) -> None:
        if self.applied:
            try:
                self.revert()
            except PatchError as exc:  # pragma: no cover - last resort at exit
                log.error("%s", exc)

    def _write_record(self) -> None:
        if self.record_dir is None:
            return
        write_record(self.record, self.record_dir, self.diff, self._backup)

    def __enter__(self) -> SourcePatch:
        self.apply()
        return self

    def __exit__(self, *exc_info) -> None:
        self.revert()

    def __repr__(self) -> str:
        return f"SourcePatch({self.name!r}, package={self.package!r}, status={self.record.status!r})"


def write_record(
    record: PatchRecord, record_dir: str | Path, diff: str, originals: dict[str, bytes] | None = None
) -> Path:
    """Write ``patch.json``, ``<name>.diff`` and saved originals into ``record_dir``."""
    folder = Path(record_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{record.name}.diff").write_text(diff)
    for rel, data in (originals or {}).items():
        saved = folder / "patch-originals" / rel
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_bytes(data)
    path = folder / PATCH_RECORD
    path.write_text(json.dumps(record.to_dict(), indent=2) + "\n")
    return path


def record_modelled(
    diff: str | Path, record_dir: str | Path, *, package: str | None = None, note: str = ""
) -> PatchRecord:
    """Record a patch that the stand-in models instead of applying it (status ``"modelled"``)."""
    if isinstance(diff, Path) or (isinstance(diff, str) and "\n" not in diff):
        path = shipped_patch(str(diff))
        text, name = path.read_text(), path.stem
    else:
        text, name = diff, "patch"
    record = PatchRecord(
        name=name,
        package=package or default_package(),
        package_version=None,
        root=None,
        files=patched_files(text),
        diff_sha256=_sha256(text.encode()),
        status="modelled",
        note=note or "not applied: the stand-in server models this change as a profile setting",
        checked_at=_now(),
    )
    write_record(record, record_dir, text)
    return record
