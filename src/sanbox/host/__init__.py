"""What touches this machine's OS: hypervisor drivers, images, disks, the guest agent client."""
