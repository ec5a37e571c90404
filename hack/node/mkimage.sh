#!/usr/bin/env bash
# Make a one-layer docker-archive image from a directory, by hand: no registry is reachable here and the
# real node must not need podman. `ctr images import` (RealNode.import_image) loads the result.
#
#   hack/node/mkimage.sh ROOTFS_DIR NAME:TAG OUT.tar [ENTRYPOINT_JSON] [CMD_JSON]
#   e.g. hack/node/mkimage.sh /tmp/root localhost/kh-node/pause:1 pause.tar '["/pause"]'
#
# The tar is reproducible (sorted, mtime 0, uid/gid 0), so its digest only changes with its content.
set -euo pipefail
ROOTFS=${1:?rootfs dir}; NAME=${2:?name:tag}; OUT=${3:?out.tar}
ENTRYPOINT=${4:-null}; CMD=${5:-null}
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$ROOTFS" -cf "$WORK/layer.tar" .
LAYER=$(sha256sum "$WORK/layer.tar" | cut -d' ' -f1)
mkdir "$WORK/$LAYER"; mv "$WORK/layer.tar" "$WORK/$LAYER/layer.tar"
cat >"$WORK/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
           "Entrypoint":$ENTRYPOINT,"Cmd":$CMD,"WorkingDir":"/"},
 "rootfs":{"type":"layers","diff_ids":["sha256:$LAYER"]}}
JSON
CONFIG=$(sha256sum "$WORK/config.json" | cut -d' ' -f1)
mv "$WORK/config.json" "$WORK/$CONFIG.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]\n' "$CONFIG" "$NAME" "$LAYER" \
  >"$WORK/manifest.json"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$WORK" \
  -cf "$OUT.tmp" manifest.json "$CONFIG.json" "$LAYER"
mv "$OUT.tmp" "$OUT"
