"""What every service of the local stack is made of: its directories, its launch description, the
configuration templates and the JVM flags they share (infra/store_services.py declares the stores,
infra/services.py the whole stack)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from xml.sax.saxutils import escape as xml_escape

from definitions.settings import Settings
from infra.errors import StackError
from infra.java import JavaRuntime

TEMPLATES = Path(__file__).resolve().parent / "templates"
JAVA_DIR = Path(__file__).resolve().parent / "java"

# JPMS openings the Hadoop, HBase and Cassandra code bases need on Java 17.
_HADOOP_OPENS = [
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in (
        "java.io",
        "java.lang",
        "java.lang.reflect",
        "java.math",
        "java.net",
        "java.nio",
        "java.text",
        "java.util",
        "java.util.concurrent",
        "java.util.zip",
        "sun.nio.ch",
        "sun.security.util",
        "sun.security.x509",
        "jdk.internal.ref",
    )
]
_HBASE_FLAGS = [
    "-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true",
    "--add-modules=jdk.unsupported",
    *_HADOOP_OPENS,
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.dns=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
]
_CASSANDRA_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
]
# Small JVM footprint for every service on a shared 2-core machine.
_COMMON_JVM = [
    "-XX:+UseSerialGC",
    "-XX:MinHeapFreeRatio=20",
    "-XX:MaxHeapFreeRatio=40",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
    "-XX:MaxMetaspaceSize=256m",
    "-Djava.net.preferIPv4Stack=true",
]


def initial_heap_mb(heap_mb: int) -> int:
    """A store's starting heap: a quarter of its limit, at least 32 MiB (never above the limit)."""
    return min(heap_mb, max(32, heap_mb // 4))


@dataclass(frozen=True)
class ServiceDirs:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def data(self) -> Path:
        return self.root / "data"


@dataclass(frozen=True)
class Service:
    name: str
    jar_group: str
    main_class: str
    heap_mb: Callable[[Settings], int]
    ports: Callable[[Settings], dict[str, int]]
    host: Callable[[Settings], str]
    render: Callable[[Settings, ServiceDirs, JavaRuntime], None]
    args: Callable[[ServiceDirs], list[str]]
    jvm_flags: Callable[[Settings, ServiceDirs], list[str]]
    check: Callable[[Settings], str]
    timeout_s: Callable[[Settings], float]
    after: tuple[str, ...] = ()
    shares_conf_with: str = ""
    extra_classpath: tuple[str, ...] = field(default=())
    # Phase 0: the stores, started together; phase 1: the platform's own processes, started
    # once the stores are healthy and bootstrapped.
    phase: int = 0
    stops: str = "group"  # who a supervised service's stop signal reaches (infra/session_leader.py)

    def dirs(self, settings: Settings) -> ServiceDirs:
        return ServiceDirs(settings.state_dir / (self.shares_conf_with or self.name))

    def command(self, settings: Settings, java: JavaRuntime) -> list[str]:
        dirs = self.dirs(settings)
        jars = settings.jars_dir / self.jar_group
        classpath = ":".join([str(dirs.conf), f"{jars}/*", *self.extra_classpath])
        heap_mb = self.heap_mb(settings)
        return [
            str(java.executable),
            # The heap starts at a quarter of its limit and grows when the store needs it, so an
            # idle store holds what it uses (SerialGC also gives back what a full collection frees).
            f"-Xms{initial_heap_mb(heap_mb)}m",
            f"-Xmx{heap_mb}m",
            *_COMMON_JVM,
            *self.jvm_flags(settings, dirs),
            "-cp",
            classpath,
            self.main_class,
            *self.args(dirs),
        ]

    def check_jars(self, settings: Settings) -> None:
        jars = settings.jars_dir / self.jar_group
        if not jars.is_dir() or not any(jars.glob("*.jar")):
            raise StackError(self.name, f"no jars in {jars}: run `make setup` (mvn resolves them from infra/maven)")


def render_template(source: str, target: Path, private: bool = False, **values: object) -> None:
    """Render a template into `target`; `private`: readable by the owner only (it holds a secret)."""
    from definitions.files import replace_text, write_private

    escape = xml_escape if source.endswith(".xml") else str
    text = Template((TEMPLATES / source).read_text()).substitute({k: escape(str(v)) for k, v in values.items()})
    target.parent.mkdir(parents=True, exist_ok=True)
    if private:
        write_private(target, text)
    else:
        replace_text(target, text)  # a start killed meanwhile leaves the whole file before


def _run_once(service: str, marker: Path, command: list[str], cwd: Path) -> None:
    """Run a one-time initialisation command (storage formatting) unless `marker` exists."""
    if marker.exists():
        return
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=180)
    if done.returncode != 0 or not marker.exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise StackError(service, f"storage initialisation failed (exit {done.returncode})", tail)


# --- Kafka -----------------------------------------------------------------------------------
