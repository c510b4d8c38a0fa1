#!/usr/bin/perl
# System V IPC steps for the in-container view tests (integration/view_test.go):
#   semget KEY NSEMS MODE | setall ID V... | semop ID NUM OP | semopn ID N
#   msgget KEY MODE
#   msgsnd ID TYPE SIZE | msgrcv ID TYPE
# KEY is a number (0x.. allowed, "private" for IPC_PRIVATE), MODE octal.
# Prints "ok <result>" or "err <errno>".
use strict;
use warnings;
use IPC::SysV qw(IPC_PRIVATE IPC_CREAT SETALL IPC_NOWAIT);
use Errno;

my $cmd = shift @ARGV;
sub key { my $k = shift; return IPC_PRIVATE if $k eq 'private'; return $k =~ /^0x/ ? hex($k) : $k + 0 }
sub res { my $r = shift; print defined($r) ? "ok $r" : "err " . ($! + 0) . " $!"; print " pid=$$\n" }

if ($cmd eq 'semget') {
    my ($k, $n, $m) = @ARGV;
    res(semget(key($k), $n, IPC_CREAT | oct($m)));
} elsif ($cmd eq 'setall') {
    my ($id, @v) = @ARGV;
    res(semctl($id, 0, SETALL, pack("s!*", @v)) ? 0 : undef);
} elsif ($cmd eq 'semop') {
    my ($id, $num, $op) = @ARGV;
    res(semop($id, pack("s!3", $num, $op, IPC_NOWAIT)) ? 0 : undef);
} elsif ($cmd eq 'semopn') {
    my ($id, $n) = @ARGV;
    res(semop($id, pack("s!3" x $n, map { (0, 1, IPC_NOWAIT) } 1 .. $n)) ? 0 : undef);
} elsif ($cmd eq 'msgget') {
    my ($k, $m) = @ARGV;
    res(msgget(key($k), IPC_CREAT | oct($m)));
} elsif ($cmd eq 'msgsnd') {
    my ($id, $type, $size) = @ARGV;
    res(msgsnd($id, pack("l! a*", $type, "x" x $size), IPC_NOWAIT) ? 0 : undef);
} elsif ($cmd eq 'msgrcv') {
    my ($id, $type) = @ARGV;
    my $buf;
    my $r = msgrcv($id, $buf, 65536, $type, IPC_NOWAIT);
    res(defined($r) ? length($buf) - length(pack("l!", 0)) : undef);
} else {
    die "view.pl: unknown step $cmd\n";
}
