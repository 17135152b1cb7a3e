"""A bucket for hostile S3 answers (the happy path is tested against a
real Swift): GET /<bucket>?list-type=2&delimiter=/&prefix=P answers a
ListBucketResult built from .objects (key -> bytes), as S3 writes it, unless
.answers[P] = (status, body bytes, delay seconds) says otherwise; GET
/<bucket>/<key> answers the object (or .sizes[key] lists another size).
Signatures are not checked."""
import time
import urllib.parse
from xml.sax.saxutils import escape

from fakes.base import FakeServer, Handler


def list_result(bucket, prefix, objects, sizes):
    keys = sorted(k for k in objects if k.startswith(prefix))
    prefixes, contents = [], []
    for k in keys:
        rest = k[len(prefix):]
        if "/" in rest:
            p = prefix + rest.split("/")[0] + "/"
            if p not in prefixes:
                prefixes.append(p)
        else:
            contents.append(k)
    body = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
            'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
            f"<Name>{bucket}</Name><Prefix>{escape(prefix)}</Prefix><Delimiter>/</Delimiter>"
            f"<KeyCount>{len(prefixes) + len(contents)}</KeyCount><MaxKeys>1000</MaxKeys>"
            "<IsTruncated>false</IsTruncated>"]
    for k in contents:
        body.append(f"<Contents><Key>{escape(k)}</Key><LastModified>2026-12-07T00:00:00.000Z"
                    f"</LastModified><ETag>&quot;x&quot;</ETag><Size>"
                    f"{sizes.get(k, len(objects[k]))}</Size><StorageClass>STANDARD"
                    "</StorageClass></Contents>")
    for p in prefixes:
        body.append(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>")
    body.append("</ListBucketResult>")
    return "".join(body).encode()


def s3_error(code, message):
    return (f"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>{code}</Code>"
            f"<Message>{message}</Message><RequestId>tx1</RequestId></Error>").encode()


class H(Handler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        f = self.fake
        url = urllib.parse.urlsplit(self.path)
        f.calls.append(self.path)
        parts = url.path.lstrip("/").split("/", 1)
        if len(parts) == 1:
            q = urllib.parse.parse_qs(url.query)
            prefix = q.get("prefix", [""])[0]
            status, body, delay = f.answers.get(
                prefix, (200, list_result(parts[0], prefix, f.objects, f.sizes), 0))
            time.sleep(delay)
            return self.reply(status, body, "application/xml")
        key = urllib.parse.unquote(parts[1])
        if key in f.objects:
            return self.reply(200, f.objects[key], "application/octet-stream")
        self.reply(404, s3_error("NoSuchKey", "The specified key does not exist."),
                   "application/xml")


class FakeS3(FakeServer):
    handler = H

    def __init__(self):
        self.objects, self.sizes, self.answers = {}, {}, {}
        super().__init__()
