# moto's server, whose KMS keys are made of a key id and key material kept in a directory, so
# that what the local stack encrypted under its key still decrypts after a restart. moto keeps
# all its state in memory; this is the KMS counterpart of DynamoDB Local's -dbPath.
# Usage: python -c <this> STATE_DIR [moto_server arguments]
import base64
import json
import os
import sys
import uuid
from pathlib import Path

import moto.kms.models as kms
from moto.server import main

state = Path(sys.argv.pop(1))
state.mkdir(parents=True, exist_ok=True)
kept = state / "kms-key.json"
if not kept.exists():
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"keyId": str(uuid.uuid4()), "material": base64.b64encode(os.urandom(32)).decode()}, out)
key = json.loads(kept.read_text())
kms.generate_key_id = lambda multi_region=False: key["keyId"]
kms.generate_master_key = lambda: base64.b64decode(key["material"])
main()
