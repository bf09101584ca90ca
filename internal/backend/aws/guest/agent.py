#!/usr/bin/python3
# Egress proxy agent on EC2, written by terraform-provider-egress (internal/backend/aws/guest/userdata.go). Reads the
# proxy's SSM parameters with the instance role, installs the Squid config they hold, reports the config id
# applied, and watches for changes. Standard library only: Debian's images ship python3 and nothing more.
# Everything specific to the proxy is in agent.json beside this file, which the user-data wrote.
import base64
import datetime
import grp
import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib

# Credentials are fetched again once they have less than this left. EC2 offers new ones at least five
# minutes before the old expire, so fetching earlier only returns the same ones again, which is harmless.
CREDENTIAL_MARGIN = datetime.timedelta(minutes=10)
# No proxy between this agent and IMDS or SSM, whatever the environment says: a token must not leave the VM.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(msg):
    print("egress-proxy-agent: " + msg, flush=True)


class AgentError(Exception):
    pass


class IMDS:
    """IMDSv2 only: every request carries a session token. There is no fallback to IMDSv1."""

    def __init__(self, endpoint, ttl):
        self.endpoint, self.ttl = endpoint.rstrip("/"), ttl
        self.token, self.renew_at = None, 0.0
        # The watch and the log shipper ask from two threads: one token, one request at a time.
        self.lock = threading.RLock()

    def session(self):
        # Renewed at half its life, so a request never races the token's expiry; a 401 renews it too.
        if self.token is None or time.monotonic() >= self.renew_at:
            req = urllib.request.Request(self.endpoint + "/latest/api/token", method="PUT",
                                         headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.ttl)})
            with OPENER.open(req, timeout=5) as r:
                self.token = r.read().decode()
            self.renew_at = time.monotonic() + self.ttl / 2
        return self.token

    def get(self, path, missing_ok=False):
        with self.lock:
            return self._get(path, missing_ok)

    def _get(self, path, missing_ok):
        for attempt in range(2):
            req = urllib.request.Request(self.endpoint + "/latest/" + path,
                                         headers={"X-aws-ec2-metadata-token": self.session()})
            try:
                with OPENER.open(req, timeout=5) as r:
                    return r.read().decode()
            except urllib.error.HTTPError as e:
                if e.code == 401 and attempt == 0:
                    self.token = None
                    continue
                if e.code == 404 and missing_ok:
                    return None
                raise AgentError("IMDS %s: HTTP %d" % (path, e.code)) from None
        raise AgentError("IMDS %s: unauthorized with a new token" % path)


class Credentials:
    def __init__(self, imds):
        self.imds, self.current, self.expires = imds, None, None
        self.lock = threading.Lock()

    def get(self, force=False):
        with self.lock:
            return self._get(force)

    def _get(self, force):
        now = datetime.datetime.now(datetime.timezone.utc)
        if force or self.current is None or self.expires - now < CREDENTIAL_MARGIN:
            roles = self.imds.get("meta-data/iam/security-credentials/", missing_ok=True)
            role = (roles or "").split("\n")[0].strip()
            if not role:
                raise AgentError("the instance has no IAM role: give it an instance profile that may read the proxy's parameters")
            doc = json.loads(self.imds.get("meta-data/iam/security-credentials/" + role))
            if doc.get("Code") != "Success":
                raise AgentError("IMDS credentials of role %s: %s" % (role, doc.get("Code")))
            self.current = (doc["AccessKeyId"], doc["SecretAccessKey"], doc["Token"])
            self.expires = datetime.datetime.strptime(doc["Expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        return self.current


def sign(method, url, region, service, headers, body, creds, now):
    """Signature Version 4: returns the headers to send, the Authorization among them."""
    u = urllib.parse.urlsplit(url)
    akid, secret, token = creds
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    scope = "%s/%s/%s/aws4_request" % (amz_date[:8], region, service)
    h = {k.lower(): v.strip() for k, v in headers.items()}
    h.update({"host": u.netloc, "content-length": str(len(body)), "x-amz-date": amz_date, "x-amz-security-token": token})
    names = sorted(h)
    canonical = "\n".join([method, u.path or "/", u.query, "".join("%s:%s\n" % (n, h[n]) for n in names),
                           ";".join(names), hashlib.sha256(body).hexdigest()])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (amz_date[:8], region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    h["authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (akid, scope, ";".join(names), signature)
    del h["host"]  # urllib sends it from the URL, as signed
    return h


class SSMError(AgentError):
    def __init__(self, status, code, message, service="SSM"):
        super().__init__("%s %s (HTTP %d): %s" % (service, code, status, message))
        self.code, self.message = code, message


# Answers that mean the credentials went stale between the check and the call: fetch new ones, once.
STALE_CREDENTIALS = {"ExpiredTokenException", "UnrecognizedClientException", "InvalidSignatureException"}


class SSM:
    # Any JSON 1.1 service: SSM by default, CloudWatch Logs with its signing name and target prefix.
    def __init__(self, endpoint, region, creds, service="ssm", target="AmazonSSM.", name="SSM"):
        self.endpoint, self.region, self.creds = endpoint, region, creds
        self.service, self.target, self.name = service, target, name

    def call(self, action, payload):
        body = json.dumps(payload).encode()
        for attempt in range(2):
            headers = sign("POST", self.endpoint, self.region, self.service,
                           {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": self.target + action},
                           body, self.creds.get(force=attempt > 0), datetime.datetime.now(datetime.timezone.utc))
            try:
                with OPENER.open(urllib.request.Request(self.endpoint, data=body, method="POST", headers=headers), timeout=20) as r:
                    return json.loads(r.read() or b"{}")
            except urllib.error.HTTPError as e:
                try:
                    err = json.loads(e.read())
                except ValueError:
                    err = {}
                code = str(err.get("__type", "HTTP%d" % e.code)).rsplit("#", 1)[-1]
                if code in STALE_CREDENTIALS and attempt == 0:
                    continue
                raise SSMError(e.code, code, err.get("message", err.get("Message", "")), self.name) from None
        raise AgentError("unreachable")

    def parameters(self, names, decrypt):
        out = self.call("GetParameters", {"Names": names, "WithDecryption": decrypt})
        return {p["Name"]: p for p in out.get("Parameters", [])}


def config_id(squid_conf, htpasswd, cert, key, backstop):
    # vmguest.ConfigID: the id the config parameter names must be that of the files this agent got.
    h = hashlib.sha256()
    h.update(b"%d\n" % len(squid_conf))
    h.update(squid_conf + htpasswd)
    if cert or key:
        h.update(b"\ntls %d %d\n" % (len(htpasswd), len(cert)))
        h.update(cert + key)
    if backstop:
        h.update(b"\nbackstop %d %d %d\n" % (len(htpasswd), len(cert) + len(key), len(backstop)))
        h.update(backstop)
    return h.hexdigest()[:16]


def with_client_ca(cid, ca, crl):
    # vmguest.WithClientCA: the id also names the client CA and CRL, which squid.conf names by path only.
    if not ca and not crl:
        return cid
    h = hashlib.sha256(b"%s\nclient-ca %d %d\n" % (cid.encode(), len(ca), len(crl)))
    h.update(ca + crl)
    return h.hexdigest()[:16]


def with_metrics(cid, ports):
    # guest.WithMetrics: the id also names the metrics ports, which no file the id covers holds.
    if ports is None:
        return cid
    return hashlib.sha256(("%s\n%s\n" % (cid, metrics_line(ports))).encode()).hexdigest()[:16]


def metrics_line(ports):
    # The metrics ports as the config's id and its MAC both name them (guest.WithMetrics, the packed fields).
    return "metrics %d %d %d" % (ports.get("port", 0), ports.get("squid_port", 0), ports.get("manager_port", 0))


def config_mac(key, prefix, config):
    # guest.ConfigMAC: HMAC-SHA256 of the config's fields, each after its length as 8 bytes big-endian.
    m = hmac.new(key, b"egress-proxy config v1\n", hashlib.sha256)
    fields = [prefix, config.get("config_id", ""), config.get("squid_conf", ""), config.get("backstop", ""), config.get("tls_cert", "")]
    if config.get("client_ca") or config.get("client_crl"):
        fields += [config.get("client_ca", ""), config.get("client_crl", "")]
    ports = config.get("metrics")
    if ports is not None:
        fields.append(metrics_line(ports))
    for field in fields:
        b = field.encode()
        m.update(len(b).to_bytes(8, "big"))
        m.update(b)
    return m.hexdigest()


def authenticated(config, secrets, prefix):
    # True when the config's MAC is the one the key in the secrets parameter gives: only who could read the
    # secrets (and so decrypt them) could have written it.
    try:
        key = base64.b64decode(secrets.get("config_key", ""), validate=True)
    except ValueError:
        return False
    mac = config.get("mac", "")
    return len(key) >= 32 and isinstance(mac, str) and hmac.compare_digest(config_mac(key, prefix, config), mac)


# guest.LoadConfig: the config a manifest (the config parameter, guest.Manifest) and its parts hold, with the
# manifest's id and MAC, or None while the parts are not the ones it names (the backend writes them before it:
# half of a write). It is not authenticated yet, and unpacks to at most limit bytes. (Comments, not docstrings:
# the user-data carries the agent without its comment lines, and EC2 takes 16 KB of it.)
def unpack(manifest, parts, limit):
    joined = "".join(parts)
    if len(parts) != manifest["parts"] or hashlib.sha256(joined.encode()).hexdigest() != manifest.get("sha256"):
        return None
    z = zlib.decompressobj(16 + zlib.MAX_WBITS)
    doc = z.decompress(base64.b64decode(joined, validate=True), limit)
    if z.unconsumed_tail or not z.eof:
        raise AgentError("the config's parts do not unpack to a config of at most %d bytes" % limit)
    config = json.loads(doc)
    config.update(config_id=manifest["config_id"], mac=manifest["mac"])
    return config


def guard_squid_conf(conf, guard):
    # Why squid.conf holds what the renderer never writes (aws/guest/guard.go), or None. Physical lines
    # are checked one by one, so a line continued with a backslash cannot hide a directive in the next.
    pinned = {d: set(lines) for d, lines in guard["pinned"].items()}
    for n, raw in enumerate(conf.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        f = line.split()
        d = f[0]
        if d not in guard["directives"]:
            return "line %d: directive %s is not one the provider writes" % (n, d[:40])
        if d in pinned and " ".join(f) not in pinned[d]:
            return "line %d: %s is not as the provider writes it" % (n, d)
        for tok in f[1:]:
            if tok.startswith('"') and tok not in guard["quoted_files"]:
                return "line %d: %s names a file the provider never names" % (n, d)
        if d == "acl" and (len(f) < 4 or f[2] not in guard["acl_types"]):
            return "line %d: an acl of a type the provider never uses" % n
        if d in ("http_port", "https_port") and any(o not in guard["port_options"] for o in f[2:]):
            return "line %d: %s has options the provider never sets" % (n, d)
    return None


def guard_backstop(backstop, guard):
    # Why the backstop is not the provider's table with its chains, or None: it must replace its own table
    # only, and hold every line the renderer writes to hook the proxy user's packets and reject them.
    lines = [line.strip() for line in backstop.splitlines() if line.strip() and not line.strip().startswith("#")]
    for want in guard["backstop_lines"]:
        if want not in lines:
            return "the backstop lacks %r" % want
    table = guard["backstop_table"]
    for line in lines:
        f = line.split()
        if f[0] in ("table", "delete", "flush", "include", "add", "define", "destroy", "reset", "create", "insert", "replace") and \
                line not in ("table inet %s" % table, "delete table inet %s" % table, "table inet %s {" % table):
            return "the backstop has a statement outside its table: %s" % shlex.quote(line[:60])
    return None


def applied_id(value):
    # The config id an applied parameter's value (guest.Applied) says runs: the value itself, or its
    # config_id when it also tells of a refusal (which stays until a config is applied).
    try:
        doc = json.loads(value or "")
    except ValueError:
        return value
    return doc.get("config_id") if isinstance(doc, dict) else value


def run(argv, **kw):
    return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def install(path, content, mode, group="proxy"):
    # Writes a file as root:proxy (or root:group), in place at once (a rename), as the other backends' guests do.
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".egress-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.chown(tmp, 0, grp.getgrnam(group).gr_gid)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def metrics_files(metrics, ports):
    # vmguest.MetricsFiles for the config's ports (guest/metrics.go): the templates the user-data carries,
    # the ports in place of their tokens; none without metrics.
    if ports is None:
        return []
    values = {"@port@": ports["port"], "@squid_port@": ports["squid_port"], "@manager_port@": ports["manager_port"]}
    out = []
    for f in metrics["files"]:
        content = f["content"]
        for token, port in values.items():
            content = content.replace(token, str(int(port)))
        out.append((f["path"], content.encode()))
    return out


def squid_state():
    return run(["systemctl", "is-active", "squid"]).stdout.decode().strip()


# A poll that fails (SSM refuses, the config is refused or half written, Squid is down) waits longer each
# time, up to this many intervals: a guest that cannot apply must not decrypt the secrets every interval
# forever, at a KMS call each, against the account's shared SSM and KMS throughput.
MAX_BACKOFF = 16


def next_poll(interval, failures):
    # Seconds until the next poll: the interval after a good one, doubled per failure in a row up to
    # MAX_BACKOFF intervals, give or take a fifth (jitter, so proxies started together do not poll together).
    return interval * min(2 ** failures, MAX_BACKOFF) * random.uniform(0.8, 1.2)


# PutLogEvents' limits (CloudWatch Logs API Reference): at most 10,000 events and 1,048,576 bytes a batch,
# each event counted as its message in UTF-8 and 26 bytes more, its events within 24 hours and in order.
MAX_EVENTS, MAX_BATCH, EVENT_OVERHEAD, MAX_SPAN_MS = 10000, 1048576, 26, 24 * 3600 * 1000
# A line longer than this is cut (an event may be 1 MB): Squid's lines hold no URL path and stay far shorter.
MAX_LINE = 65536


def line_time_ms(line, now_ms):
    # When Squid logged the line: the JSON line's time, or the text line's first field, in seconds.
    try:
        return int(float(json.loads(line)["time"]) * 1000)
    except (ValueError, KeyError, TypeError):
        pass
    try:
        return int(float(line.split(None, 1)[0]) * 1000)
    except (ValueError, IndexError):
        return now_ms


def batch(events, cap=MAX_EVENTS):
    # How many of the events, from the first, make one PutLogEvents batch within its limits (and cap).
    size, n = 0, 0
    for ts, msg in events[:cap]:
        size += len(msg.encode()) + EVENT_OVERHEAD
        if size > MAX_BATCH or ts - events[0][0] > MAX_SPAN_MS:
            break
        n += 1
    return n


class Refused(AgentError):
    pass


class Shipper:
    """Follows Squid's access log and sends its lines to the proxy's CloudWatch Logs stream, in order: the
    file is the buffer, and the position saved after each batch CloudWatch Logs took is where a restart goes
    on, so a failure delays lines and loses none."""

    def __init__(self, cfg, creds):
        c = cfg["logs"]
        self.api = SSM(c["endpoint"], cfg["region"], creds, "logs", "Logs_20140328.", "CloudWatch Logs")
        self.group, self.stream, self.path, self.flush = c["group"], c["stream"], c["path"], c["flush"]
        self.state = os.path.join(cfg["state_dir"], "logs.position")
        self.events, self.ends = [], []  # lines read and not yet taken, and where each ends in the file
        self.size, self.last_ms = 0, 0  # the events' size as PutLogEvents counts it
        self.cap = MAX_EVENTS  # the most lines the next batch holds: fewer after a batch refused

    def saved(self):
        try:
            ino, pos = (read(self.state) or b"").split()
            return int(ino), int(pos)
        except ValueError:
            return None

    def add(self, line, end):
        msg = line.decode("utf-8", "replace").rstrip("\r")
        if msg:
            now_ms = int(time.time() * 1000)
            # Never earlier than the line before: CloudWatch Logs takes a batch in time order only.
            self.last_ms = max(line_time_ms(msg, now_ms), self.last_ms)
            self.events.append((self.last_ms, msg))
            self.ends.append(end)
            self.size += len(msg.encode()) + EVENT_OVERHEAD

    def send(self, ino):
        n = batch(self.events, self.cap)
        payload = {"logGroupName": self.group, "logStreamName": self.stream,
                   "logEvents": [{"timestamp": ts, "message": m} for ts, m in self.events[:n]]}
        try:
            out = self.api.call("PutLogEvents", payload)
        except SSMError as e:
            if e.code == "InvalidParameterException" and n > 1:
                # A batch CloudWatch Logs will never take, which no retry mends: half of it next, at once,
                # until the line it refuses is alone.
                self.cap = n // 2
                raise Refused(str(e)) from None
            if e.code == "InvalidParameterException":
                log("CloudWatch Logs refused a line, which is skipped: %s: %.200s" % (e, self.events[0][1]))
                out = {}
            elif e.code != "ResourceNotFoundException" or "stream" not in e.message:
                raise
            else:
                self.create_stream()
                out = self.api.call("PutLogEvents", payload)
        self.cap = MAX_EVENTS
        rejected = out.get("rejectedLogEventsInfo")
        if rejected:
            log("CloudWatch Logs rejected some of %d lines as too old or too new: %s" % (n, json.dumps(rejected)))
        with open(self.state + ".new", "w") as f:
            f.write("%d %d\n" % (ino, self.ends[n - 1]))
        os.replace(self.state + ".new", self.state)
        self.size -= sum(len(m.encode()) + EVENT_OVERHEAD for _, m in self.events[:n])
        del self.events[:n], self.ends[:n]

    def create_stream(self):
        try:
            self.api.call("CreateLogStream", {"logGroupName": self.group, "logStreamName": self.stream})
        except SSMError as e:
            if e.code != "ResourceAlreadyExistsException":
                raise

    def run(self):
        f, ino, partial, first, failures, retry_at = None, None, b"", None, 0, 0.0
        resume = self.saved()
        while True:
            if f is None:
                try:
                    f = open(self.path, "rb")
                except OSError:
                    time.sleep(1)
                    continue
                ino = os.fstat(f.fileno()).st_ino
                if resume and resume[0] == ino and resume[1] <= os.fstat(f.fileno()).st_size:
                    f.seek(resume[1])
                resume, partial = None, b""
            full = len(self.events) >= MAX_EVENTS or self.size >= MAX_BATCH
            line = b"" if full else f.readline(MAX_LINE)
            if line:
                # A line is added once whole, and cut at MAX_LINE however long it grows.
                partial = (partial + line.rstrip(b"\n"))[:MAX_LINE]
                if line.endswith(b"\n"):
                    self.add(partial, f.tell())
                    partial = b""
                    first = first or time.monotonic()
                continue
            now = time.monotonic()
            if self.events and now >= retry_at and (full or now - first >= self.flush):
                try:
                    self.send(ino)
                    failures, first = 0, (time.monotonic() if self.events else None)
                except Refused as e:
                    log("CloudWatch Logs refused a batch (%s): trying %d lines at most" % (e, self.cap))
                except (AgentError, OSError) as e:
                    failures += 1
                    retry_at = now + min(2 ** failures, 300) * random.uniform(0.8, 1.2)
                    log("sending %d access log lines to %s/%s: %s; again in %ds" % (len(self.events), self.group, self.stream, e, retry_at - now))
                continue
            try:
                st = os.stat(self.path)
                # Rotated (another file) or truncated: this one is read to its end; the next from its start.
                if not self.events and (st.st_ino != ino or st.st_size < f.tell()):
                    f.close()
                    f = None
                    continue
            except OSError:
                pass
            time.sleep(0.5)



class Agent:
    def __init__(self, cfg):
        self.cfg, self.paths = cfg, cfg["paths"]
        self.imds = IMDS(cfg["imds_endpoint"], cfg["token_ttl"])
        self.ssm = SSM(cfg["ssm_endpoint"], cfg["region"], Credentials(self.imds))
        self.names = {k: cfg["prefix"] + v for k, v in cfg["parameters"].items()}
        self.seen = None      # versions of config and secrets last read whole
        self.rejected = None  # the config id Squid or nft refused: not tried again until it changes

    def own_addresses(self):
        # Lists the VM's own addresses, which squid.conf and the backstop refuse as destinations: those of its
        # interfaces, and the public ones EC2 translates to it, which are on none of them (an Elastic IP
        # associated after boot among them). True when the list in force changed.
        found = set()
        for line in run(["ip", "-o", "addr", "show"]).stdout.decode().splitlines():
            f = line.split()
            if len(f) > 3:
                found.add(f[3].split("/")[0])
        try:
            for mac in (self.imds.get("meta-data/network/interfaces/macs/", missing_ok=True) or "").split():
                for key in ("public-ipv4s", "ipv6s"):
                    found.update((self.imds.get("meta-data/network/interfaces/macs/%s%s" % (mac, key), missing_ok=True) or "").split())
        except (AgentError, OSError) as e:
            log("listing the public addresses: %s" % e)
        valid = set()
        for a in found:
            try:
                valid.add(str(ipaddress.ip_address(a)))  # only addresses reach Squid's config
            except ValueError:
                pass
        content = "".join(a + "\n" for a in sorted(valid)).encode()
        path = self.paths["own"]
        if read(path) == content:
            return False
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".new", "wb") as f:
            f.write(content)
        os.chmod(path + ".new", 0o644)
        os.rename(path + ".new", path)
        return True

    def listening(self, config):
        # systemd calls Squid started a moment before it listens: applied is reported once the health port
        # takes connections (any answer will do), so that whoever waits for it can use the proxy. It asks for
        # the health check itself, which the access log and mtail tell from a client's request.
        port = self.cfg["health_port"]
        for line in config.decode(errors="replace").splitlines():
            f = line.split()
            if f[:3] == ["acl", "health_port", "localport"] and len(f) > 3:
                port = int(f[3])
        for _ in range(120):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            try:
                c.request("GET", self.cfg["health_path"])
                c.getresponse().read()
                return True
            except (OSError, http.client.HTTPException):
                time.sleep(1)
            finally:
                c.close()
        return False

    def apply(self, config, secrets):
        # Installs one config; returns False when Squid or nft refuses it. Squid restarts with it: the drop-in
        # of squid.service lists the own addresses and loads the backstop before it starts.
        p = self.paths
        conf, backstop = config["squid_conf"].encode(), config["backstop"].encode()
        passwd = secrets.get("htpasswd", "").encode()
        # The TLS files and the client CA and CRL: the key alone is a secret.
        tls_files = ((p["cert"], config.get("tls_cert", "").encode(), 0o644), (p["key"], secrets.get("tls_key", "").encode(), 0o640),
                     (p["client_ca"], config.get("client_ca", "").encode(), 0o644), (p["client_crl"], config.get("client_crl", "").encode(), 0o644))
        cid = config["config_id"]
        tmp = tempfile.mkdtemp()
        # The config names the TLS files where they are installed, so they are in place before it is checked;
        # the ones they replace come back unless it is installed.
        old = {f: (read(f), mode) for f, _, mode in tls_files}
        installed = False
        try:
            for name, content in (("squid.conf", conf), ("backstop.nft", backstop)):
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(content)
            for f, content, mode in tls_files:
                if content:
                    install(f, content, mode)
            # Files in place before Squid is installed, so its first start already uses them (--force-confold).
            if not shutil.which("squid") or not shutil.which("nft"):
                if not shutil.which("squid"):
                    install(p["conf"], conf, 0o640)
                    if passwd:
                        install(p["htpasswd"], passwd, 0o640)
                install(p["backstop"], backstop, 0o640)
                r = run(["sh", "-c", self.cfg["install_command"]])
                if r.returncode != 0:
                    raise AgentError("installing squid and nftables: %s" % r.stdout.decode(errors="replace")[-2000:])
            for argv, what in ((["nft", "-c", "-f", os.path.join(tmp, "backstop.nft")], "nft rejected the backstop of config"),
                               (["squid", "-k", "parse", "-f", os.path.join(tmp, "squid.conf")], "squid rejected config")):
                r = run(argv)
                if r.returncode != 0:
                    lines = r.stdout.decode(errors="replace").splitlines()
                    why = [line for line in lines if "FATAL" in line or "ERROR" in line or "Error" in line] or lines
                    log("%s %s; the last good config stays: %s" % (what, cid, " / ".join(why[-3:])))
                    return False
            metrics = metrics_files(self.cfg["metrics"], config.get("metrics"))
            metrics_changed = self.stop_metrics(metrics)
            if passwd:
                install(p["htpasswd"], passwd, 0o640)
            elif os.path.exists(p["htpasswd"]):
                os.unlink(p["htpasswd"])  # no config uses a password any more: its hash does not stay
            install(p["conf"], conf, 0o640)
            install(p["backstop"], backstop, 0o640)
            installed = True
            for f, content, _ in tls_files:
                if not content and os.path.exists(f):
                    os.unlink(f)  # the config no longer names it
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if not installed:
                for f, (content, mode) in old.items():
                    if content is not None:
                        install(f, content, mode)
                    elif os.path.exists(f):
                        os.unlink(f)
        run(["systemctl", "enable", "squid"])
        r = run(["systemctl", "restart", "squid"])
        if r.returncode != 0:
            raise AgentError("squid did not restart with config %s: %s" % (cid, r.stdout.decode(errors="replace")))
        self.start_metrics(metrics, metrics_changed, conf)
        with open(os.path.join(self.cfg["state_dir"], "applied.new"), "w") as f:
            f.write(cid + "\n")
        os.rename(os.path.join(self.cfg["state_dir"], "applied.new"), os.path.join(self.cfg["state_dir"], "applied"))
        log("applied config %s" % cid)
        return True

    def stop_metrics(self, want):
        # Before the backstop or Squid changes: when the metrics files want (path, content) differ from those on
        # disk, the programs stop and are disabled and their files go, so no metrics port is ever open without
        # the backstop's rule for its ranges (start_metrics writes the new ones). True when they differed.
        m = self.cfg["metrics"]
        wanted = dict(want)
        if all(read(path) == wanted.get(path) for path in m["paths"]):
            return False
        if any(os.path.exists(path) for path in m["paths"]):
            # One unit at a time: systemctl disables none of several when one is unknown, as the unit of ours
            # is on a guest whose metrics began before it.
            for u in m["units"]:
                run(["systemctl", "disable", "--now", u])
        for path in m["paths"]:
            if os.path.exists(path):
                os.unlink(path)
        return True

    def start_metrics(self, want, changed, conf):
        # Once Squid runs the config (its cache manager with it) and answers: writes the metrics files, has
        # systemd read them, installs the programs where the image lacks them and (re)starts them; without
        # metrics, has systemd forget the files stop_metrics removed. Files already in place: the programs
        # are only started again if they do not run.
        m = self.cfg["metrics"]
        if not want:
            if changed:
                run(["systemctl", "daemon-reload"])
            return
        # One unit at a time: is-active with several succeeds when any one is active.
        if not changed and all(run(["systemctl", "is-active", "--quiet", u]).returncode == 0 for u in m["units"]):
            return
        if not self.listening(conf):
            raise AgentError("squid does not take connections: the metrics programs are not started")
        for path, content in want:
            install(path, content, 0o644, group="root")
        for argv in (["systemctl", "daemon-reload"], ["sh", "-c", m["start"]]):
            r = run(argv)
            if r.returncode != 0:
                raise AgentError("the metrics programs did not start: %s" % r.stdout.decode(errors="replace")[-2000:])
        log("metrics programs started")

    def cycle(self):
        # One look at the parameters. Their values are read whole (decrypted) only when a version changed or
        # Squid does not run: polling reads no secret, and costs no KMS call.
        n = self.names
        params = self.ssm.parameters([n["config"], n["secrets"], n["applied"]], False)
        if n["config"] not in params:
            log("no parameter %s yet" % n["config"])
            return False
        versions = (params[n["config"]]["Version"], params.get(n["secrets"], {}).get("Version"))
        own_changed = self.own_addresses()
        for _ in range(120):  # a Squid still starting is not one to restart
            if squid_state() != "activating":
                break
            time.sleep(1)
        applied = (read(os.path.join(self.cfg["state_dir"], "applied")) or b"").decode().strip()
        active = squid_state() == "active"
        if versions != self.seen or not active:
            whole = self.ssm.parameters([n["config"], n["secrets"]], True)
            manifest = json.loads(whole[n["config"]]["Value"])
            secrets = json.loads(whole[n["secrets"]]["Value"]) if n["secrets"] in whole else {}
            config = self.read_parts(manifest)
            if config is None:
                log("config %s: its parts are not all written yet; reading them again" % manifest["config_id"])
                return False
            got = with_metrics(with_client_ca(config_id(config["squid_conf"].encode(), secrets.get("htpasswd", "").encode(), config.get("tls_cert", "").encode(),
                                                        secrets.get("tls_key", "").encode(), config["backstop"].encode()),
                                              config.get("client_ca", "").encode(), config.get("client_crl", "").encode()),
                               config.get("metrics"))
            if got != config["config_id"]:
                # The backend writes the two parameters one after the other: this is half of a change.
                log("config %s and the secrets read with it do not belong together yet; reading them again" % config["config_id"])
                return False
            cid = config["config_id"]
            # Read again only once a version changes: a config refused stays refused, and costs no decrypt.
            self.seen = versions
            why = None
            if not authenticated(config, secrets, self.cfg["prefix"]):
                # Half of a change (the config written, its new key not yet: tried again once the secrets'
                # version changes) or a config the provider did not write.
                why = "it is not authenticated by the proxy's key in %s" % n["secrets"]
            else:
                why = guard_squid_conf(config["squid_conf"], self.cfg["guard"]) or guard_backstop(config["backstop"], self.cfg["guard"])
                if why:
                    self.rejected = (cid, config["mac"])
                    self.report_refused(params, applied, cid, config["mac"], "the agent's guards refused it: " + why)
            if why:
                log("refused config %s: %s; the last good config stays" % (cid, why))
                if not active and applied:
                    run(["systemctl", "restart", "squid"])
                return False
            if cid != applied or not active:
                # A refused config is not tried again, unless the provider writes it again (a new key, so a
                # new MAC): that is another attempt, asked for by an apply.
                attempt = (cid, config["mac"])
                if attempt == self.rejected or not self.apply(config, secrets):
                    if attempt != self.rejected:
                        self.report_refused(params, applied, cid, config["mac"], "squid or nft rejected it")
                    self.rejected = attempt
                    if not active and applied:
                        # Squid is down and the new config refused: the last good one on disk serves.
                        run(["systemctl", "restart", "squid"])
                    return False
                applied, own_changed, active = cid, False, True
            self.rejected = None
        if own_changed and active:
            if run(["sh", self.paths["prestart"], "backstop"]).returncode != 0 or run(["systemctl", "reload", "squid"]).returncode != 0:
                raise AgentError("squid did not take the VM's new own addresses")
            log("own addresses changed: backstop and squid reloaded")
        if applied and applied_id(params.get(n["applied"], {}).get("Value")) != applied:
            conf = read(self.paths["conf"]) or b""
            if not self.listening(conf):
                raise AgentError("squid runs config %s but does not take connections" % applied)
            self.ssm.call("PutParameter", {"Name": n["applied"], "Value": applied, "Type": "String", "Overwrite": True})
            log("reported config %s applied" % applied)
        return True

    # The config the manifest names, its parts read in one call (unpack); None while they do not match.
    def read_parts(self, manifest):
        count = manifest.get("parts")
        if type(count) is not int or not 1 <= count <= self.cfg["max_parts"]:
            raise AgentError("the config parameter is no manifest of 1 to %d parts" % self.cfg["max_parts"])
        names = [self.names["config_part"] % i for i in range(1, count + 1)]
        got = self.ssm.parameters(names, False)
        return unpack(manifest, [got[name]["Value"] for name in names if name in got], self.cfg["max_config_bytes"])

    def report_refused(self, params, applied, cid, mac, reason):
        # Says in the applied parameter (guest.Applied) that config cid was refused, beside the id that
        # runs, so that whoever waits for cid fails at once with the reason instead of at its timeout.
        value = json.dumps({"config_id": applied or "-", "refused": cid, "refused_mac": mac[:16], "reason": reason[:300]}, sort_keys=True)
        if params.get(self.names["applied"], {}).get("Value") == value:
            return
        try:
            self.ssm.call("PutParameter", {"Name": self.names["applied"], "Value": value, "Type": "String", "Overwrite": True})
        except (AgentError, OSError) as e:
            log("reporting the refusal of config %s: %s" % (cid, e))

    def watch(self):
        os.makedirs(self.cfg["state_dir"], exist_ok=True)
        if self.cfg.get("logs"):
            threading.Thread(target=self.ship, daemon=True).start()
        failures = 0
        while True:
            try:
                ok = self.cycle()
            except Exception as e:  # noqa: BLE001 -- one bad poll must not end the watch
                log("%s: %s" % (type(e).__name__, e))
                ok = False
            failures = 0 if ok else failures + 1
            time.sleep(next_poll(self.cfg["interval"], failures))


    def ship(self):
        while True:
            try:
                Shipper(self.cfg, self.ssm.creds).run()
            except Exception as e:  # noqa: BLE001 -- the log goes on after any failure, from where it was
                log("access log shipper: %s: %s" % (type(e).__name__, e))
                time.sleep(10)


def main():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent.json")) as f:
        agent = Agent(json.load(f))
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "watch":
        agent.watch()
    elif cmd == "own-addresses":
        agent.own_addresses()
    else:
        sys.exit("usage: %s watch|own-addresses" % sys.argv[0])


if __name__ == "__main__":
    main()
