"""The real servers the record and replay tests run (Debian's packages),
with the rrc-check arguments that load them: one home for their command
lines."""
import os
from pathlib import Path

REDIS = (["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--bind", "127.0.0.1"], 6379,
         ["redis", "--server", "127.0.0.1:6379"])
MEMCACHED = (["memcached", "-t", "4", "-p", "11211", "-l", "127.0.0.1", "-U", "0", "-u", "root", "-m", "64"], 11211,
             ["memcached", "--server", "127.0.0.1:11211"])


def real_server(name: str, tmp_path: Path, memcached_opts=(), redis_opts=()):
    """argv, port and the rrc-check arguments (without the load's) for
    redis, memcached -t 4 or lighttpd (serving a 16 KiB file from tmp_path)."""
    if name == "redis":
        argv, port, client = REDIS
        return [*argv, *redis_opts], port, client
    if name == "memcached":
        argv, port, client = MEMCACHED
        return [*argv, *memcached_opts], port, client
    argv, www = lighttpd_site(tmp_path, {"f.bin": bytes(range(256)) * 64}, port=8080, bind="127.0.0.1",
                              extra='mimetype.assign = (".bin" => "application/octet-stream")')
    return argv, 8080, ["http", "--url", "http://127.0.0.1:8080/f.bin", "--file", str(www / "f.bin")]


def lighttpd_site(tmp_path: Path, files: dict, port: int = 80, bind: str = "0.0.0.0", extra: str = ""):
    """lighttpd serving `files` (name -> bytes) from tmp_path/www over
    long keep-alive connections: its argv and the document root. `bind`
    "[::]" with extra 'server.v4mapped = "enable"' makes it dual-stack."""
    www = tmp_path / "www"
    www.mkdir()
    for name, body in files.items():
        (www / name).write_bytes(body)
    conf = tmp_path / "lighttpd.conf"
    conf.write_text(f'server.document-root = "{www}"\nserver.port = {port}\nserver.bind = "{bind}"\n'
                    f'server.max-keep-alive-requests = 65535\nserver.max-keep-alive-idle = 300\n{extra}\n')
    # the service runs as another user in its container: the path must be readable
    os.chmod(tmp_path, 0o755)
    return ["lighttpd", "-D", "-f", str(conf)], www
