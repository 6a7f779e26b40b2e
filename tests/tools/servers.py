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
    www = tmp_path / "www"
    www.mkdir()
    (www / "f.bin").write_bytes(bytes(range(256)) * 64)
    conf = tmp_path / "lighttpd.conf"
    conf.write_text(f'server.document-root = "{www}"\nserver.port = 8080\nserver.bind = "127.0.0.1"\n'
                    'server.max-keep-alive-requests = 65535\nmimetype.assign = (".bin" => "application/octet-stream")\n')
    os.chmod(tmp_path, 0o755)
    return ["lighttpd", "-D", "-f", str(conf)], 8080, ["http", "--url", "http://127.0.0.1:8080/f.bin", "--file", str(www / "f.bin")]
