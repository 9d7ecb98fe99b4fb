#!/bin/bash
set -e
cat > /app/backup.sh <<'EOF'
#!/bin/bash
# Copy every file from /app/docs into /app/backup.
mkdir -p /app/backup
for f in /app/docs/*; do
    cp -- "$f" /app/backup/
done
echo "backup done"
EOF
chmod +x /app/backup.sh
