# perl IPC::SysV: a semaphore handed between two processes, then a message
# queue round trip. Prints "perl-sem ok" / "perl-msg ok" or the error.
use strict;
use warnings;
use IPC::SysV qw(IPC_CREAT IPC_EXCL S_IRUSR S_IWUSR SEM_UNDO);
use IPC::Semaphore;
use IPC::Msg;
$| = 1;
my $sem = IPC::Semaphore->new(0x4711, 1, S_IRUSR | S_IWUSR | IPC_CREAT | IPC_EXCL) or die "perl-sem semget: $!\n";
$sem->setval(0, 0) or die "perl-sem setval: $!\n";
my $pid = fork() // die "fork: $!";
if ($pid == 0) { select(undef, undef, undef, 0.2); $sem->op(0, 1, 0) or die "child op: $!"; exit 0 }
$sem->op(0, -1, SEM_UNDO) or die "perl-sem op: $!\n";
waitpid($pid, 0);
my $v = $sem->getval(0);
$sem->remove;
print "perl-sem ok value=$v\n";
my $q = IPC::Msg->new(0x4712, S_IRUSR | S_IWUSR | IPC_CREAT);
if (!$q) { print "perl-msg msgget failed: $!\n"; exit 0 }
$pid = fork() // die "fork: $!";
if ($pid == 0) { my $buf; $q->rcv($buf, 64, 1) or die "child rcv: $!"; $q->snd(2, "pong:$buf") or die; exit 0 }
$q->snd(1, "ping") or die "perl-msg snd: $!\n";
my $buf;
$q->rcv($buf, 64, 2) or die "perl-msg rcv: $!\n";
waitpid($pid, 0);
$q->remove;
print "perl-msg ok $buf\n";
