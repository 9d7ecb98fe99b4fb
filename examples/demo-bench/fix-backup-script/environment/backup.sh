#!/bin/bash
# Copy every file from /app/docs into /app/backup.
mkdir -p /app/backup
for f in $(ls /app/docs); do
    cp /app/docs/$f /app/backup/
done
echo "backup done"
