"""Ship the egress proxy's access log to Cloud Logging, as the VM's service account.

Written by terraform-provider-egress (internal/backend/gcp/guest/cloudlogging.py) and run by
egress-proxy-cloud-logging.service when the instance metadata names a log (egress-cloud-logging).
Follows Squid's access log from the position it last shipped (kept in the state directory, so a
restart neither loses nor repeats lines), across logrotate's renames, and writes its lines with
entries.write: a JSON line as jsonPayload, any other as textPayload, on the gce_instance resource
of this VM. Batches stay far below the API's limits; a failed write is retried with backoff and
the position only moves once the entries are written. Standard library only.
"""

import datetime
import json
import os
import random
import sys
import time
import urllib.error
import urllib.request

MD, LOGGING, LOG_FILE, STATE = sys.argv[1:5]
POSITION = os.path.join(STATE, "position")
# Cloud Logging takes 256 KiB an entry and 10 MiB a request ("Quotas and limits"); a batch stays at
# 1 MiB and 1000 entries, and an entry at 64 KiB (an access log line is some hundred bytes).
MAX_BATCH_BYTES = 1024 * 1024
MAX_BATCH_ENTRIES = 1000
MAX_ENTRY_BYTES = 64 * 1024
# How long a line may wait for others to join its batch.
FLUSH_SECONDS = 2.0
BACKOFF_MAX = 60.0


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def metadata(path):
    req = urllib.request.Request(MD + "/" + path, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


class Token:
    def __init__(self):
        self.value, self.expires = None, 0.0

    def get(self):
        if self.value is None or time.monotonic() > self.expires:
            t = json.loads(metadata("instance/service-accounts/default/token"))
            # Renewed a minute before it expires.
            self.value = t["access_token"]
            self.expires = time.monotonic() + max(0, int(t.get("expires_in", 0)) - 60)
        return self.value

    def drop(self):
        self.value = None


def rfc3339(seconds):
    t = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)


def entry(line):
    """The log entry of one access log line."""
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        e = {"jsonPayload": obj}
        if isinstance(obj.get("time"), (int, float)):
            e["timestamp"] = rfc3339(obj["time"])
    else:
        e = {"textPayload": line}
    if len(json.dumps(e)) > MAX_ENTRY_BYTES:
        # Refused by the API, it would stop the log behind it: sent cut, and marked so.
        e = {"textPayload": line[: MAX_ENTRY_BYTES // 2], "labels": {"egress_truncated": "true"}}
    return e


def read_position():
    try:
        with open(POSITION) as f:
            ino, off = f.read().split()
            return int(ino), int(off)
    except (OSError, ValueError):
        return None, 0


def save_position(ino, off):
    tmp = POSITION + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (ino, off))
    os.replace(tmp, POSITION)


class Follower:
    """Reads whole lines from the access log, from the saved position, across rotation."""

    def __init__(self):
        self.f, self.ino, self.off = None, None, 0
        ino, off = read_position()
        self.open(ino, off)

    def open(self, want_ino=None, off=0):
        try:
            f = open(LOG_FILE, "rb")
        except OSError:
            return
        ino = os.fstat(f.fileno()).st_ino
        if want_ino is not None and ino != want_ino:
            # Rotated while the shipper was down: the lines of the old file after the position are lost to
            # it unless the old file is still the first rotation, which is read to its end first.
            old = LOG_FILE + ".1"
            try:
                g = open(old, "rb")
                if os.fstat(g.fileno()).st_ino == want_ino:
                    g.seek(off)
                    self.f, self.ino, self.off = g, want_ino, off
                    f.close()
                    return
                g.close()
            except OSError:
                pass
            off = 0
        if os.fstat(f.fileno()).st_size < off:
            off = 0  # truncated
        f.seek(off)
        self.f, self.ino, self.off = f, ino, off

    def lines(self, max_bytes, max_count):
        """Whole lines available now, at most max_count and about max_bytes of them, and the offset after them."""
        if self.f is None:
            self.open()
            if self.f is None:
                return [], self.off
        out, size = [], 0
        while size < max_bytes and len(out) < max_count:
            pos = self.f.tell()
            raw = self.f.readline()
            if not raw.endswith(b"\n"):
                self.f.seek(pos)  # a line Squid is still writing
                break
            size += len(raw)
            text = raw.decode("utf-8", "replace").rstrip("\n")
            if text:
                out.append(text)
        return out, self.f.tell()

    def rotated(self):
        """At the end of the file: when the path now names another file, move to it."""
        try:
            ino = os.stat(LOG_FILE).st_ino
        except OSError:
            return
        if ino != self.ino:
            self.f.close()
            self.f = None
            self.open()

    def commit(self, off):
        self.off = off
        save_position(self.ino, off)


def write(token, body):
    """POSTs one entries.write request; returns None when written or dropped, else a reason to retry."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(LOGGING + "/v2/entries:write", data=data, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + token.get()})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        return None
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:500]
        if e.code == 401:
            token.drop()
        if e.code == 400:
            # partialSuccess: the valid entries are written; those refused never will be.
            log("cloud logging refused entries, dropped: %s" % detail)
            return None
        return "HTTP %d: %s" % (e.code, detail)
    except (OSError, ValueError) as e:
        return str(e)


def main():
    log_id = metadata("instance/attributes/egress-cloud-logging").strip()
    project = metadata("project/project-id").strip()
    instance_id = metadata("instance/id").strip()
    zone = metadata("instance/zone").strip().rsplit("/", 1)[-1]
    base = {
        "logName": "projects/%s/logs/%s" % (project, log_id),
        "resource": {"type": "gce_instance", "labels": {"project_id": project, "instance_id": instance_id, "zone": zone}},
        "partialSuccess": True,
    }
    token, follower = Token(), Follower()
    log("shipping %s to %s" % (LOG_FILE, base["logName"]))
    batch, size, first, end, delay = [], 0, None, None, 1.0
    while True:
        lines, off = follower.lines(MAX_BATCH_BYTES // 2 - size, MAX_BATCH_ENTRIES - len(batch))
        for line in lines:
            e = entry(line)
            batch.append(e)
            size += len(json.dumps(e))
        if lines:
            end = off
            first = first or time.monotonic()
        full = len(batch) >= MAX_BATCH_ENTRIES or size >= MAX_BATCH_BYTES // 2
        if batch and (full or time.monotonic() - first >= FLUSH_SECONDS):
            try:
                why = write(token, dict(base, entries=batch))
            except (OSError, ValueError, KeyError) as e:
                why = "no token from the metadata server: %s" % e
            if why is None:
                # The position moves only once the batch is written: a restart resends, never skips.
                follower.commit(end)
                batch, size, first, delay = [], 0, None, 1.0
                continue
            # Retried with exponential backoff and jitter; the lines wait in the file, not in memory.
            log("cloud logging write failed, retrying in %.0fs: %s" % (delay, why))
            time.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, BACKOFF_MAX)
            continue
        if not lines:
            if not batch:
                # Only between batches: a batch's lines and its position are of one file.
                follower.rotated()
            time.sleep(0.5)

if __name__ == "__main__":
    main()
