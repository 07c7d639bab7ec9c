"""Finding a Java runtime the services can run on."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.errors import StackError

# Cassandra 5.0 calls System.setSecurityManager, which JDK 24+ refuses; Spark 4 needs 17+.
MIN_JAVA = 17
MAX_JAVA = 23


@dataclass(frozen=True)
class JavaRuntime:
    executable: Path
    version: int

    @property
    def home(self) -> Path:
        return self.executable.resolve().parent.parent


def find_java(java_home: str = "") -> JavaRuntime:
    """The java to launch services with: settings' java_home, then JAVA_HOME, then PATH."""
    candidates: list[Path] = []
    for home in (java_home, os.environ.get("JAVA_HOME", "")):
        if home:
            candidates.append(Path(home) / "bin" / "java")
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    if not candidates:
        raise StackError(
            "java",
            "no java found: install a JDK 17 (apt-get install openjdk-17-jdk-headless) or set LAMBDA_STACK__JAVA_HOME",
        )
    seen: list[str] = []
    for path in candidates:
        if not path.exists():
            seen.append(f"{path} (missing)")
            continue
        version = java_version(path)
        if MIN_JAVA <= version <= MAX_JAVA:
            return JavaRuntime(path, version)
        seen.append(f"{path} (Java {version})")
    raise StackError(
        "java",
        f"no usable java: need a Java between {MIN_JAVA} and {MAX_JAVA}, found {', '.join(seen)}; "
        "set LAMBDA_STACK__JAVA_HOME to a JDK 17",
    )


def java_version(executable: Path) -> int:
    out = subprocess.run([str(executable), "-version"], capture_output=True, text=True, timeout=30)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major
