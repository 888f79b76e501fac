"""Adds document attributes derived from the Debian corpus itself to its JSON Lines, for the filter
benchmarks and the Lucene comparison (issue 40): source (the id's prefix: debpkg, gcide, kjv, ...),
section and priority (debpkg documents, from the bookworm Packages lists beside the corpus) and words
(the body's length in whitespace-separated words, every document).

  python derive_attributes.py CORPUS.jsonl APT_LISTS_DIR OUT.jsonl
"""
import glob
import json
import subprocess
import sys


def packages(apt_dir):
    info = {}
    for path in sorted(glob.glob(apt_dir + "/*_Packages.lz4")):
        text = subprocess.run(["lz4cat", path], check=True, stdout=subprocess.PIPE).stdout.decode("utf-8", "replace")
        for stanza in text.split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if ": " in line and not line.startswith(" "):
                    key, value = line.split(": ", 1)
                    fields[key] = value
            if "Package" in fields:
                info.setdefault(fields["Package"], fields)
    return info


def main():
    corpus, apt_dir, out_path = sys.argv[1:4]
    info = packages(apt_dir)
    with open(corpus, encoding="utf-8") as f, open(out_path, "w", encoding="utf-8") as out:
        for line in f:
            doc = json.loads(line)
            source, _, name = doc["id"].partition(":")
            doc["source"] = source
            doc["words"] = len((doc.get("body") or "").split())
            if source == "debpkg" and name in info:
                section = info[name].get("Section", "")
                doc["section"] = section.split("/")[-1]
                if info[name].get("Priority"):
                    doc["priority"] = info[name]["Priority"]
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
