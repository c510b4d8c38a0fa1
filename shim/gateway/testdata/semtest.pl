# semtest.pl: IPC::SysV semaphores; output must match native.
use strict; use warnings;
use IPC::SysV qw(IPC_PRIVATE IPC_CREAT IPC_EXCL IPC_RMID IPC_STAT IPC_NOWAIT SEM_UNDO GETVAL SETVAL GETALL SETALL GETNCNT S_IRUSR S_IWUSR);
use IPC::Semaphore;
# asleep waits (10 s at most) until process $pid sleeps in a System V IPC
# call (natively) or in the seccomp trap (under the gateway): a fixed
# pause loses on a loaded machine.
sub asleep { my ($pid) = @_; for (1 .. 100000) { open(my $s, "<", "/proc/$pid/stat") or return; my $l = <$s>; close $s; open(my $w, "<", "/proc/$pid/wchan") or return; my $c = <$w> // ""; close $w; return if $l =~ /\) S / && $c =~ /^(do_msgrcv|do_msgsnd|__do_semtimedop|do_semtimedop|seccomp_do_user_notification)/; select(undef, undef, undef, 0.0001); } }
$| = 1;
my $s = IPC::Semaphore->new(IPC_PRIVATE, 3, S_IRUSR | S_IWUSR | IPC_CREAT) or die "new: $!";
print "setall: ", ($s->setall(1, 2, 3) ? 1 : 0), "\n";
print "getall: ", join(",", $s->getall), "\n";
print "op dec: ", ($s->op(0, -1, SEM_UNDO) ? 1 : 0), "\n";
print "op nowait: ", ($s->op(0, -1, IPC_NOWAIT) ? 1 : "0 $!{EAGAIN}"), "\n";
print "getval 0: ", $s->getval(0), "\n";
print "setval 1: ", ($s->setval(1, 7) ? 1 : 0), "\n";
print "getncnt: ", $s->getncnt(0), "\n";
my $st = $s->stat;
print "stat nsems: ", $st->nsems, " mode: ", sprintf("%o", $st->mode & 0777), "\n";
print "multi op: ", ($s->op(1, -7, 0, 2, -3, 0) ? 1 : 0), " -> ", join(",", $s->getall), "\n";
my $k = semget(0x7171, 1, IPC_CREAT | IPC_EXCL | 0600);
print "semget key: ", (defined $k ? "ok" : "fail $!"), "\n";
my $k2 = semget(0x7171, 1, IPC_CREAT | IPC_EXCL | 0600);
print "semget excl: ", (defined $k2 ? "ok" : "fail " . ($!{EEXIST} ? "EEXIST" : "$!")), "\n";
print "semctl bad: ", (defined semctl(99999, 0, GETVAL, 0) ? "ok" : "fail " . ($!{EINVAL} ? "EINVAL" : "$!")), "\n";
if (my $pid = fork) { asleep($pid); print "ncnt with sleeper: ", $s->getncnt(1), "\n"; $s->op(1, 1, 0); waitpid($pid, 0); print "child exit: ", $? >> 8, "\n"; }
else { exit($s->op(1, -1, 0) ? 3 : 4); }
semctl($k, 0, IPC_RMID, 0);
print "remove: ", ($s->remove ? 1 : 0), "\n";
