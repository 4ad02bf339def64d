"""A real nginx (Debian's package) on loopback for tests: its config written by the test, the
process started in the foreground and stopped by its PID.

nginx runs with ``-p <prefix> -c <prefix>/nginx.conf -e <prefix>/error.log -g 'daemon off;'``:
everything it writes (pid file, error and access logs, temporary files) stays in the test's
``prefix`` folder, and the master process is our child (it stops its workers when it gets
SIGTERM). One nginx may serve several :class:`GatewaySite` (one ``server`` block each, on its own
port), so a test module starts it once for all its cases.

``.ci/run`` installs the package (``apt-get install nginx``) where the command is missing;
outside CI a machine without ``nginx`` skips the test, in CI it fails it
(:func:`tests.conftest.require_shared`'s rule).

Example::

    site = GatewaySite(port=free_port(), upstreams=("127.0.0.1:8000",), limit_conn=4)
    with nginx_gateway(tmp_path, [site]) as gateway:
        requests.get(f"{site.url}/health")
        gateway.site_error_log(site).read_text()
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from llm_locust.run.launcher import stop_process

START_TIMEOUT_S = 10.0

ACCESS_FORMAT = (
    '$remote_addr [$time_local] "$request" $status $body_bytes_sent '
    "rt=$request_time upstream=$upstream_addr upstream_status=$upstream_status"
)
"""The access log's line (``log_format timed``): the combined format's core plus the request time
(s), the upstream that served it and its status (``-`` when nginx answered itself, e.g. a
``limit_conn`` 503)."""


def nginx_binary() -> str:
    """The ``nginx`` program; skips the calling test when there is none, fails it in CI."""
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if found:
        return found
    message = "nginx not found (Debian: apt-get install nginx; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True, kw_only=True)
class GatewaySite:
    """One ``server`` block: a loopback port proxying every path to ``upstreams``.

    Attributes
    ----------
    port : int
        Where nginx listens (127.0.0.1).
    upstreams : tuple of str
        ``host:port`` of each backend (round robin, nginx's default, when more than one).
    limit_conn : int or None
        ``limit_conn`` per client address (zone keyed on ``$binary_remote_addr``: every loopback
        client is one key) on every path; None for no limit. An empty key (``$server_name``
        without a ``server_name``) would never limit.
    limit_conn_status : int, default 503
        The status of a request over the limit (``limit_conn_status``).
    proxy_read_timeout_s : float or None
        ``proxy_read_timeout`` (the longest wait between two reads from the upstream, the
        response header included), s; None for nginx's default (60 s).
    extra : str
        More directives for the ``location /`` block, as written in nginx.conf.
    upstream_keepalive : int, default 32
        Idle keep-alive connections kept to the upstreams (``keepalive``); 0 for a new connection
        per request. llama.cpp's ``llama-server`` closes a kept-alive connection of its own
        accord (cpp-httplib's keep-alive limits), and nginx, reusing it for a POST at that
        instant, answers 502 ("upstream prematurely closed connection") and marks the replica
        down ("no live upstreams"): seen with two llama-servers behind round robin.
    """

    port: int
    upstreams: tuple[str, ...]
    limit_conn: int | None = None
    limit_conn_status: int = 503
    proxy_read_timeout_s: float | None = None
    extra: str = ""
    upstream_keepalive: int = 32

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def nginx_conf(prefix: Path, sites: Sequence[GatewaySite]) -> str:
    """The nginx.conf text for ``sites``, every file nginx writes under ``prefix``.

    Streaming answers pass through unbuffered (``proxy_buffering off``: each SSE event reaches
    the client when the backend sends it) over keep-alive upstream connections (HTTP/1.1).
    """
    prefix = Path(prefix).resolve()
    blocks = []
    for k, site in enumerate(sites):
        upstream = "\n".join(f"        server {u};" for u in site.upstreams)
        directives = [f"proxy_pass http://backend{k};", "proxy_http_version 1.1;", "proxy_buffering off;"]
        if site.upstream_keepalive:  # else nginx's default "Connection: close" to the upstream
            directives.insert(2, 'proxy_set_header Connection "";')
        if site.limit_conn is not None:
            directives += [f"limit_conn perclient {site.limit_conn};", f"limit_conn_status {site.limit_conn_status};"]
        if site.proxy_read_timeout_s is not None:
            directives.append(f"proxy_read_timeout {_ms(site.proxy_read_timeout_s)};")
        if site.extra:
            directives.append(site.extra)
        body = "\n".join(f"            {d}" for d in directives)
        blocks.append(
            f"    upstream backend{k} {{\n{upstream}\n"
            + (f"        keepalive {site.upstream_keepalive};\n" if site.upstream_keepalive else "")
            + "    }\n"
            + f"    server {{\n        listen 127.0.0.1:{site.port};\n"
            + f"        error_log {prefix / site_error_log(site)} error;\n"
            + f"        location / {{\n{body}\n        }}\n    }}\n"
        )
    temp = "\n".join(
        f"    {name}_temp_path {prefix / (name + '_temp')};"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        "worker_processes 1;\n"
        f"pid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'} error;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        f"    log_format timed '{ACCESS_FORMAT}';\n"
        f"    access_log {prefix / 'access.log'} timed;\n"
        f"{temp}\n"
        "    limit_conn_zone $binary_remote_addr zone=perclient:1m;\n" + "".join(blocks) + "}\n"
    )


def site_error_log(site: GatewaySite) -> str:
    """The file name of ``site``'s own error log (its requests' lines: ``limiting connections``,
    ``upstream timed out``), so each case reads only its own."""
    return f"error-{site.port}.log"


@dataclass(frozen=True)
class NginxGateway:
    """A running nginx: its master process, its sites and the logs it writes."""

    process: subprocess.Popen
    sites: tuple[GatewaySite, ...]
    prefix: Path

    @property
    def error_log(self) -> Path:
        """nginx's main error log (its start and stop; the sites' requests log to their own)."""
        return self.prefix / "error.log"

    def site_error_log(self, site: GatewaySite | None = None) -> Path:
        """The error log of ``site`` (default: the only one): ``limiting connections by zone``,
        ``upstream timed out`` lines of its requests."""
        if site is None:
            (site,) = self.sites
        return self.prefix / site_error_log(site)

    @property
    def access_log(self) -> Path:
        """One line per request in :data:`ACCESS_FORMAT`."""
        return self.prefix / "access.log"


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def start_nginx(prefix: Path, sites: Sequence[GatewaySite]) -> NginxGateway:
    """Write ``prefix/nginx.conf`` for ``sites``, check it (``nginx -t``), start nginx in the
    foreground and wait until every site's port accepts connections.

    Raises
    ------
    RuntimeError
        The config is refused (nginx's own message), nginx exits, or a port does not accept
        within :data:`START_TIMEOUT_S` (nginx is stopped first).
    """
    binary = nginx_binary()
    prefix = Path(prefix).resolve()
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_conf(prefix, sites))
    argv = [binary, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    checked = subprocess.run([*argv, "-t", "-q"], capture_output=True, text=True, timeout=30)
    if checked.returncode != 0:
        raise RuntimeError(f"nginx -t refused {conf}: {checked.stderr.strip()[-1000:]}")
    process = subprocess.Popen(
        [*argv, "-g", "daemon off;"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    gateway = NginxGateway(process, tuple(sites), prefix)
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = [site.port for site in sites]
    while waiting:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited with {process.returncode}: {process.stderr.read().decode()[-1000:]}")
        if time.monotonic() > deadline:
            stop_nginx(gateway)
            raise RuntimeError(f"nginx did not accept on port(s) {waiting} within {START_TIMEOUT_S:g} s")
        waiting = [port for port in waiting if not _accepts(port)]
        if waiting:
            time.sleep(0.05)
    return gateway


def stop_nginx(gateway: NginxGateway) -> None:
    """SIGTERM nginx's master by its PID (its fast shutdown stops the workers), SIGKILL after 10 s."""
    stop_process(gateway.process, grace_s=10)
    if gateway.process.stderr is not None:
        gateway.process.stderr.close()


@contextmanager
def nginx_gateway(prefix: Path, sites: Sequence[GatewaySite]) -> Iterator[NginxGateway]:
    """:func:`start_nginx` for the ``with`` block, :func:`stop_nginx` after it."""
    gateway = start_nginx(prefix, sites)
    try:
        yield gateway
    finally:
        stop_nginx(gateway)
