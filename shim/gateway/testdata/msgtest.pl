# msgtest.pl: IPC::Msg message queues; output must match native.
use strict; use warnings;
use IPC::SysV qw(IPC_PRIVATE IPC_CREAT IPC_EXCL IPC_NOWAIT MSG_NOERROR S_IRUSR S_IWUSR);
use IPC::Msg;
# asleep waits (10 s at most) until process $pid sleeps in a System V IPC
# call (natively) or in the seccomp trap (under the gateway): a fixed
# pause loses on a loaded machine.
sub asleep { my ($pid) = @_; for (1 .. 100000) { open(my $s, "<", "/proc/$pid/stat") or return; my $l = <$s>; close $s; open(my $w, "<", "/proc/$pid/wchan") or return; my $c = <$w> // ""; close $w; return if $l =~ /\) S / && $c =~ /^(do_msgrcv|do_msgsnd|__do_semtimedop|do_semtimedop|seccomp_do_user_notification)/; select(undef, undef, undef, 0.0001); } }
$| = 1;
my $q = IPC::Msg->new(IPC_PRIVATE, S_IRUSR | S_IWUSR | IPC_CREAT) or die "new: $!";
print "snd 1: ", ($q->snd(1, "one") ? 1 : 0), "\n";
print "snd 2: ", ($q->snd(2, "two two") ? 1 : 0), "\n";
print "snd 1b: ", ($q->snd(1, "uno") ? 1 : 0), "\n";
my $st = $q->stat;
print "stat qnum: ", $st->qnum, " qbytes: ", $st->qbytes, " mode: ", sprintf("%o", $st->mode & 0777), "\n";
my $buf;
print "rcv type 2: ", $q->rcv($buf, 64, 2), " '$buf'\n";
print "rcv any: ", $q->rcv($buf, 64, 0), " '$buf'\n";
print "rcv e2big: ", (defined $q->rcv($buf, 1, 0) ? "ok" : "fail " . ($!{E2BIG} ? "E2BIG" : "$!")), "\n";
print "rcv noerror: ", $q->rcv($buf, 1, 0, MSG_NOERROR), " '$buf'\n";
print "rcv nowait: ", (defined $q->rcv($buf, 64, 0, IPC_NOWAIT) ? "ok" : "fail " . ($!{ENOMSG} ? "ENOMSG" : "$!")), "\n";
$q->set(qbytes => 10);
print "qbytes: ", $q->stat->qbytes, "\n";
print "snd fill: ", ($q->snd(3, "0123456789") ? 1 : 0), "\n";
print "snd full nowait: ", ($q->snd(3, "x", IPC_NOWAIT) ? 1 : "fail " . ($!{EAGAIN} ? "EAGAIN" : "$!")), "\n";
if (my $pid = fork) { asleep($pid); $q->rcv($buf, 64, 3); waitpid($pid, 0); print "child exit: ", $? >> 8, "\n"; }
else { exit($q->snd(4, "later") ? 3 : 4); }
print "rcv from child: ", $q->rcv($buf, 64, 4), " '$buf'\n";
my $k = msgget(0x7272, IPC_CREAT | IPC_EXCL | 0600);
print "msgget key: ", (defined $k ? "ok" : "fail $!"), "\n";
my $k2 = msgget(0x7272, IPC_CREAT | IPC_EXCL | 0600);
print "msgget excl: ", (defined $k2 ? "ok" : "fail " . ($!{EEXIST} ? "EEXIST" : "$!")), "\n";
msgctl($k, 0, 0);
print "remove: ", ($q->remove ? 1 : 0), "\n";
print "snd removed: ", ($q->snd(1, "x") ? 1 : "fail " . ($!{EINVAL} ? "EINVAL" : "$!")), "\n";
