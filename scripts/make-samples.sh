#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Rebuilds the small data samples bundled with the examples, deterministically, from the full archives:
#   examples/imdb/sample/aclImdb/train/{pos,neg}/*.txt   1,250 + 1,250 IMDb training reviews (< 2 MB)
#   examples/clue/sample/tnews_public/{train,labels}.json 5,000 TNEWS training lines + labels (< 1 MB)
# Usage: scripts/make-samples.sh IMDB_ARCHIVE TNEWS_ARCHIVE
#   IMDB_ARCHIVE  a tar(.gz) holding aclImdb/train/{pos,neg}/<id>_<rating>.txt (e.g. aclImdb_v1.tar.gz)
#   TNEWS_ARCHIVE a tar(.gz) holding tnews_public/{train.json,labels.json}
# Selection (same archives -> same bytes):
#   IMDb: per class, reviews of at most IMDB_MAX_BYTES bytes (default 1300, which keeps the sample
#   under 2 MB without truncating any review), sorted by numeric id, every k-th from the first,
#   k = floor(eligible / 1250), first 1,250 taken. Short reviews are over-represented by design.
#   TNEWS: lines 1, 11, 21, ... of train.json (stride 10), first 5,000 taken, bytes unchanged.
set -euo pipefail
export LC_ALL=C

if [ $# -ne 2 ]; then
  sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
imdb_archive=$1
tnews_archive=$2
for f in "$imdb_archive" "$tnews_archive"; do
  [ -r "$f" ] || { echo "make-samples: cannot read archive '$f'" >&2; exit 1; }
done

root=$(cd "$(dirname "$0")/.." && pwd)
per_class=1250
max_bytes=${IMDB_MAX_BYTES:-1300}
tnews_lines=5000
tnews_stride=10

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Both samples and their notes are built under $work/new first and checked; only then do they
# replace examples/{imdb,clue}/sample, so a bad archive or a size over the limit changes nothing.
new="$work/new"

# ---- IMDb
imdb_out="$new/imdb/aclImdb"
tar -tvf "$imdb_archive" > "$work/imdb.lst"
: > "$work/members"
for cls in neg pos; do
  # GNU tar -tv columns: mode owner/group size date time name. Keep "id size name", sort by id.
  awk -v cls="$cls" -v max="$max_bytes" '
    $6 ~ ("(^|/)train/" cls "/[0-9]+_[0-9]+\\.txt$") && $3 + 0 <= max {
      n = split($6, parts, "/"); split(parts[n], id, "_"); print id[1], $3, $6
    }' "$work/imdb.lst" | sort -n -k1,1 > "$work/eligible.$cls"
  eligible=$(wc -l < "$work/eligible.$cls")
  if [ "$eligible" -lt "$per_class" ]; then
    echo "make-samples: only $eligible $cls reviews of <= $max_bytes bytes in $imdb_archive, need $per_class" >&2
    exit 1
  fi
  stride=$((eligible / per_class))
  awk -v s="$stride" -v n="$per_class" '(NR - 1) % s == 0 && k < n { k++; print $3 }' "$work/eligible.$cls" \
    > "$work/members.$cls"
  cat "$work/members.$cls" >> "$work/members"
  echo "imdb: $cls: $eligible reviews <= $max_bytes bytes, stride $stride, $(wc -l < "$work/members.$cls") taken"
done
readme=$(awk '$6 ~ /(^|\/)aclImdb\/README$/ { print $6; exit }' "$work/imdb.lst")
[ -n "$readme" ] && echo "$readme" >> "$work/members"
mkdir -p "$work/imdb"
tar -xf "$imdb_archive" -C "$work/imdb" -T "$work/members"
mkdir -p "$imdb_out/train/pos" "$imdb_out/train/neg"
for cls in neg pos; do
  while read -r m; do mv "$work/imdb/$m" "$imdb_out/train/$cls/"; done < "$work/members.$cls"
done
[ -n "$readme" ] && mv "$work/imdb/$readme" "$imdb_out/README"
for cls in neg pos; do
  got=$(find "$imdb_out/train/$cls" -name '*.txt' | wc -l)
  [ "$got" -eq "$per_class" ] || { echo "make-samples: $cls has $got files, expected $per_class" >&2; exit 1; }
done

# ---- TNEWS
tnews_out="$new/clue/tnews_public"
mkdir -p "$work/tnews"
tar -xf "$tnews_archive" -C "$work/tnews"
train=$(find "$work/tnews" -name train.json -path '*tnews_public*' | sort | head -n 1)
labels=$(find "$work/tnews" -name labels.json -path '*tnews_public*' | sort | head -n 1)
[ -n "$train" ] && [ -n "$labels" ] || { echo "make-samples: no tnews_public/{train,labels}.json in $tnews_archive" >&2; exit 1; }
mkdir -p "$tnews_out"
awk -v s="$tnews_stride" -v n="$tnews_lines" '(NR - 1) % s == 0 && k < n { k++; print }' "$train" > "$tnews_out/train.json"
cp "$labels" "$tnews_out/labels.json"
got=$(wc -l < "$tnews_out/train.json")
[ "$got" -eq "$tnews_lines" ] || { echo "make-samples: TNEWS sample has $got lines, expected $tnews_lines" >&2; exit 1; }
echo "tnews: $got of $(wc -l < "$train") lines (stride $tnews_stride)"

# ---- Provenance notes beside the samples
cat > "$new/imdb/README.md" <<NOTE
# IMDb sample

$((2 * per_class)) reviews ($per_class pos, $per_class neg) from the training split of the Large Movie Review
Dataset (Maas et al., ACL 2011; https://ai.stanford.edu/~amaas/data/sentiment/), in its original layout
\`aclImdb/train/{pos,neg}/<id>_<rating>.txt\`, unmodified; \`aclImdb/README\` is the dataset's own README
(cite the paper when you use the data). Selection: reviews of at most $max_bytes bytes, sorted by id, taken
with a fixed stride, so short reviews are over-represented. Regenerate with \`scripts/make-samples.sh\`.
NOTE
cat > "$new/clue/README.md" <<NOTE
# TNEWS sample

$tnews_lines lines (every ${tnews_stride}th, from the first) of \`train.json\` and the whole \`labels.json\` of TNEWS,
the Toutiao short-news classification task of the CLUE benchmark (Xu et al., COLING 2020;
https://github.com/CLUEbenchmark/CLUE), bytes unchanged. Regenerate with \`scripts/make-samples.sh\`.
NOTE

# ---- Sizes (bytes of content; on-disk usage is larger because of per-file blocks)
content_bytes() { find "$1" -type f -printf '%s\n' | awk '{ t += $1 } END { print t + 0 }'; }
imdb_bytes=$(content_bytes "$new/imdb")
tnews_bytes=$(content_bytes "$new/clue")
echo "imdb sample:  $imdb_bytes bytes"
echo "tnews sample: $tnews_bytes bytes"
[ "$imdb_bytes" -le 2000000 ] || { echo "make-samples: IMDb sample over 2 MB" >&2; exit 1; }
[ "$tnews_bytes" -le 1000000 ] || { echo "make-samples: TNEWS sample over 1 MB" >&2; exit 1; }

# ---- Every check passed: replace the bundled samples.
for ex in imdb clue; do
  rm -rf "$root/examples/$ex/sample"
  mv "$new/$ex" "$root/examples/$ex/sample"
done
echo "make-samples: examples/imdb/sample and examples/clue/sample replaced"
