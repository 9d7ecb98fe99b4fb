#!/bin/bash
set -e
sed -i 's/start = page \* page_size/start = (page - 1) * page_size/' /app/pagination.py
