#!/usr/bin/env python3
"""Writes the built-in sample corpus: Debian's own package descriptions, as JSON Lines
({"id": package, "title": synopsis, "body": long description}). Every Debian machine has them:
the packages apt knows (apt-cache dumpavail, after apt-get update) or, failing that, the installed ones."""
import glob, json, os, subprocess, sys, tempfile


def stanzas(text):
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" in fields:
            yield fields


def description(fields):
    desc = fields.get("Description", fields.get("Description-en", ""))
    synopsis, _, rest = desc.partition("\n")
    body = " ".join("" if l.strip() == "." else l.strip() for l in rest.splitlines())
    return synopsis.strip(), " ".join(body.split())


def translations():
    """Long descriptions of every package in the release (Debian's Translation-en index), fetched into a
    private list directory so the system's apt state is untouched; empty when offline."""
    lists = tempfile.mkdtemp(prefix="isn-sample-")
    os.makedirs(os.path.join(lists, "partial"))
    r = subprocess.run(["apt-get", "update", "-qq", "-o", f"Dir::State::Lists={lists}", "-o", "Acquire::Languages=en"],
                       capture_output=True)
    found = sorted(glob.glob(os.path.join(lists, "*_main_i18n_Translation-en*")), key=os.path.getsize)
    if r.returncode or not found:
        return ""
    return subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", found[-1]], capture_output=True,
                          errors="replace", text=True).stdout


def main(out_path):
    text = translations()
    if text.count("\nPackage:") < 1000:
        # Offline: synopses of every known package, long descriptions of the installed ones.
        text = subprocess.run(["dpkg-query", "-W", "-f", "Package: ${Package}\nDescription: ${Description}\n\n"],
                              capture_output=True, text=True, errors="replace", check=True).stdout
        text += "\n\n" + subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, errors="replace").stdout
    seen, n = set(), 0
    with open(out_path, "w", encoding="utf-8") as out:
        for f in stanzas(text):
            name = f["Package"]
            synopsis, body = description(f)
            if name in seen or not (synopsis or body):
                continue
            seen.add(name)
            out.write(json.dumps({"id": name, "title": synopsis, "body": body}, ensure_ascii=False) + "\n")
            n += 1
    print(f"make-sample: {n} package descriptions in {out_path}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make-sample.py OUT.jsonl")
    main(sys.argv[1])
