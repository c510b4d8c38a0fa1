#!/bin/sh
# apache2 (mpm_prefork, two listeners: its accept mutex is taken around
# every accept) with its mutexes on SysV semaphores (Mutex sysvsem),
# serving 200 requests on the container's loopback from 4 concurrent perl
# clients. With "keep", apache is left running (the test then counts the
# semaphore sets the kernel holds, from the host).
set -e
. /etc/apache2/envvars
mkdir -p /run/lock "$APACHE_RUN_DIR" "$APACHE_LOCK_DIR" "$APACHE_LOG_DIR"
echo "Mutex sysvsem default" > /etc/apache2/conf-enabled/zz-sysvsem.conf
echo "ServerName localhost" >> /etc/apache2/conf-enabled/zz-sysvsem.conf
echo "Listen 8080" >> /etc/apache2/conf-enabled/zz-sysvsem.conf
a2dismod -q mpm_event >/dev/null 2>&1 || true
a2enmod -q mpm_prefork >/dev/null 2>&1
echo hello-from-apache > /var/www/html/index.html
apache2 -k start
for i in $(seq 50); do perl -MIO::Socket::INET -e 'exit(IO::Socket::INET->new("127.0.0.1:80") ? 0 : 1)' && break; sleep 0.1; done
ok=$(perl -MIO::Socket::INET -e '
  my @kids; for my $k (1..4) { my $p = fork; if (!$p) { my $n = 0;
    for (1..50) { my $s = IO::Socket::INET->new("127.0.0.1:80") or next; print $s "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
      local $/; my $r = <$s>; $n++ if $r =~ /200 OK.*hello-from-apache/s } exit $n } push @kids, $p }
  my $t = 0; for (@kids) { waitpid $_, 0; $t += $? >> 8 } print $t')
echo "apache-requests ok=$ok/200"
grep -i -E "emerg|alert|crit|error" "$APACHE_LOG_DIR/error.log" | head -3 || true
[ "${1:-}" = keep ] || apache2 -k stop
