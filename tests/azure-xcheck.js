// SPDX-License-Identifier: BSD-3-Clause
// The independent Azure client of check_obj: Microsoft's @azure/storage-blob
// (npm, pinned by tests/obj_util.h).
//
// usage: node azure-xcheck.js CONNSTR mkcontainer CONTAINER
//        node azure-xcheck.js CONNSTR put CONTAINER BLOB FILE   (block blob; staged blocks above 4 MiB)
//        node azure-xcheck.js CONNSTR get CONTAINER BLOB FILE
'use strict';

const { BlobServiceClient } = require('@azure/storage-blob');

async function main() {
  const [cs, cmd, container, blob, file] = process.argv.slice(2);
  const svc = BlobServiceClient.fromConnectionString(cs);
  const c = svc.getContainerClient(container);
  if (cmd === 'mkcontainer') {
    await c.createIfNotExists();
  } else if (cmd === 'put') {
    await c
      .getBlockBlobClient(blob)
      .uploadFile(file, { blockSize: 4 << 20, maxSingleShotSize: 4 << 20, concurrency: 4 });
  } else if (cmd === 'get') {
    await c.getBlobClient(blob).downloadToFile(file);
  } else {
    throw new Error('unknown command ' + cmd);
  }
}

main().catch(err => {
  process.stderr.write('azure-xcheck: ' + (err && err.message ? err.message : err) + '\n');
  process.exit(1);
});
