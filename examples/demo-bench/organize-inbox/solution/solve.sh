#!/bin/bash
set -e
mkdir -p /app/sorted/images /app/sorted/documents
for f in /app/inbox/*; do
    case "${f,,}" in
        *.jpg|*.jpeg|*.png) mv -- "$f" /app/sorted/images/ ;;
        *.txt|*.pdf|*.md) mv -- "$f" /app/sorted/documents/ ;;
    esac
done
