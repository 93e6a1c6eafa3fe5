#!/usr/bin/env python3
"""Validates generated JSON texts against their schemas (used by json_schema_test).

Input: a JSON file [{"schema": {...}, "samples": ["...", ...]}, ...]. Every sample must
parse as JSON (strictly: the whole text, leading/trailing whitespace allowed) and validate
against its schema with jsonschema's Draft 2020-12 validator. Prints one line per failure
and exits 1 if any; prints "ok N" otherwise.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed (tools/setup.sh installs it)")
    sys.exit(2)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    bad = 0
    n = 0
    for case in cases:
        schema = case["schema"]
        validator = jsonschema.Draft202012Validator(schema)
        for text in case["samples"]:
            n += 1
            try:
                value = json.loads(text)
            except ValueError as e:
                print("not JSON: %r (%s) for schema %s" % (text, e, json.dumps(schema)))
                bad += 1
                continue
            errors = list(validator.iter_errors(value))
            if errors:
                print("invalid: %r: %s for schema %s" % (text, errors[0].message, json.dumps(schema)))
                bad += 1
    if bad:
        print("%d of %d samples failed" % (bad, n))
        sys.exit(1)
    print("ok %d" % n)


if __name__ == "__main__":
    main()
