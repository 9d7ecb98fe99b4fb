#!/bin/bash
set -e
sed -i '/^\[server\]/,/^\[/{s/^host = .*/host = 0.0.0.0/;s/^port = .*/port = 8080/}' /app/config/app.ini
