// SPDX-License-Identifier: BSD-3-Clause
// Runs s3rver (npm, pinned by tests/obj_util.h) for check_obj on a loopback
// port with its own data directory, and adds what s3rver 3.7.1 lacks:
//
//  - SigV4 verification: s3rver checks the access key id of a V4 request but
//    not its signature. This middleware recomputes the signature from the
//    request (canonical request, string to sign, HMAC chain, as AWS's
//    "Signature Version 4" documentation describes it) and answers 403
//    SignatureDoesNotMatch when it differs. Requests of the AWS CLI pass it
//    too, which is how this verifier is checked.
//  - AbortMultipartUpload (DELETE /bucket/key?uploadId=) and
//    ListMultipartUploads (GET /bucket?uploads): s3rver keeps the parts of an
//    upload in <dir>/<bucket>/.../<id> until it is completed and has no way
//    to drop them or list them. Both are answered here from that directory.
//
//  - injected failures, for the retry tests: the first two requests for a key
//    containing "flaky-503" get 503 SlowDown, the first for "flaky-reset"
//    has its connection reset, and every one for "always-500" gets 500
//    InternalError.
//
// usage: node s3rver-run.js DIR PORT BUCKET [BUCKET...]
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const S3rver = require('s3rver');

const [dir, port, ...buckets] = process.argv.slice(2);
const ACCESS = 'S3RVER';
const SECRET = 'S3RVER';

const hmac = (k, s) => crypto.createHmac('sha256', k).update(s).digest();
const sha256 = s => crypto.createHash('sha256').update(s).digest('hex');
const enc = s =>
  encodeURIComponent(s).replace(/[!'()*]/g, c => '%' + c.charCodeAt(0).toString(16).toUpperCase());

function xmlError(ctx, status, code, message) {
  ctx.status = status;
  ctx.type = 'application/xml';
  ctx.body =
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>' + code + '</Code><Message>' +
    message + '</Message></Error>';
}

// Returns null when the request's SigV4 signature is right (or it has none).
function sigv4Problem(req) {
  const auth = req.headers['authorization'];
  if (!auth || !auth.startsWith('AWS4-HMAC-SHA256 ')) return null;
  const f = {};
  for (const part of auth.slice(17).split(',')) {
    const i = part.indexOf('=');
    f[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  const [access, date, region, service] = (f.Credential || '').split('/');
  if (access !== ACCESS) return null; // s3rver answers InvalidAccessKeyId itself
  const [rawPath, rawQuery = ''] = req.url.split(/\?(.*)/s);
  const query = rawQuery
    .split('&')
    .filter(Boolean)
    .map(kv => {
      const i = kv.indexOf('=');
      const k = i < 0 ? kv : kv.slice(0, i);
      const v = i < 0 ? '' : kv.slice(i + 1);
      return [enc(decodeURIComponent(k)), enc(decodeURIComponent(v.replace(/\+/g, ' ')))];
    })
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : 1))
    .map(([k, v]) => k + '=' + v)
    .join('&');
  const signed = (f.SignedHeaders || '').split(';');
  const headers = signed
    .map(h => h + ':' + String(req.headers[h] || '').trim().replace(/\s+/g, ' ') + '\n')
    .join('');
  const payload = req.headers['x-amz-content-sha256'] || sha256('');
  const canonical = [req.method, rawPath, query, headers, signed.join(';'), payload].join('\n');
  const scope = [date, region, service, 'aws4_request'].join('/');
  const sts = ['AWS4-HMAC-SHA256', req.headers['x-amz-date'], scope, sha256(canonical)].join('\n');
  let key = hmac('AWS4' + SECRET, date);
  key = hmac(key, region);
  key = hmac(key, service);
  key = hmac(key, 'aws4_request');
  const want = hmac(key, sts).toString('hex');
  if (want === f.Signature) return null;
  return 'The request signature we calculated does not match the signature you provided. ' +
    'Check your key and signing method.';
}

// s3rver's directory of an upload's parts (FilesystemStore's layout)
const uploadsDir = bucket => path.join(dir, bucket, '.._uploads');
function findUploadsDir(bucket) {
  // the store names it with its suffix format; look for it rather than guess
  const b = path.join(dir, bucket);
  try {
    for (const e of fs.readdirSync(b)) if (e.endsWith('uploads')) return path.join(b, e);
  } catch (e) {
    /* no bucket */
  }
  return uploadsDir(bucket);
}

const seen = new Map();
function injected(ctx) {
  const n = (seen.get(ctx.path) || 0) + 1;
  seen.set(ctx.path, n);
  if (ctx.path.includes('flaky-503') && n <= 2) {
    xmlError(ctx, 503, 'SlowDown', 'Please reduce your request rate.');
    return true;
  }
  if (ctx.path.includes('flaky-reset') && n <= 1) {
    ctx.req.socket.destroy();
    ctx.respond = false;
    return true;
  }
  if (ctx.path.includes('always-500')) {
    xmlError(ctx, 500, 'InternalError', 'We encountered an internal error. Please try again.');
    return true;
  }
  return false;
}

async function extra(ctx, next) {
  if (injected(ctx)) return;
  const problem = sigv4Problem(ctx.req);
  if (problem) return xmlError(ctx, 403, 'SignatureDoesNotMatch', problem);
  const m = /^\/([^/?]+)(?:\/([^?]*))?/.exec(ctx.path);
  const bucket = m && m[1];
  if (ctx.method === 'DELETE' && m && m[2] && 'uploadId' in ctx.query) {
    const id = String(ctx.query.uploadId);
    const d = path.join(findUploadsDir(bucket), id);
    if (!/^[0-9a-f]+$/.test(id) || !fs.existsSync(d))
      return xmlError(ctx, 404, 'NoSuchUpload', 'The specified upload does not exist.');
    fs.rmSync(d, { recursive: true, force: true });
    ctx.status = 204;
    return;
  }
  if (ctx.method === 'GET' && m && !m[2] && 'uploads' in ctx.query) {
    if (!fs.existsSync(path.join(dir, bucket)))
      return xmlError(ctx, 404, 'NoSuchBucket', 'The specified bucket does not exist');
    const d = findUploadsDir(bucket);
    let items = '';
    if (fs.existsSync(d)) {
      for (const id of fs.readdirSync(d)) {
        let key = '';
        try {
          key = fs.readFileSync(path.join(d, id, 'key'), 'utf8');
        } catch (e) {
          continue;
        }
        items += '<Upload><Key>' + key + '</Key><UploadId>' + id + '</UploadId></Upload>';
      }
    }
    ctx.type = 'application/xml';
    ctx.body =
      '<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult><Bucket>' + bucket +
      '</Bucket><IsTruncated>false</IsTruncated>' + items + '</ListMultipartUploadsResult>';
    return;
  }
  await next();
}

const server = new S3rver({
  address: '127.0.0.1',
  port: Number(port),
  directory: dir,
  silent: true,
  configureBuckets: buckets.map(name => ({ name })),
});
server.middleware.unshift(extra);
server.run().then(
  addr => {
    // keep-alive as AWS does (node's default closes idle connections after 5 s)
    server.httpServer.keepAliveTimeout = 60000;
    server.httpServer.headersTimeout = 65000;
    process.stdout.write('s3rver listening on ' + addr.address + ':' + addr.port + '\n');
  },
  err => {
    process.stderr.write('s3rver: ' + err.message + '\n');
    process.exit(1);
  },
);
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
