package identity

import "testing"

func TestParseIdentityFromCmdline(t *testing.T) {
	id, err := Parse("console=ttyS0 beachball.allocation_id=alc_1 beachball.placement_id=plc_2 beachball.generation=3 \n beachball.bootstrap_nonce=ab12")
	if err != nil {
		t.Fatal(err)
	}
	if id.AllocationID != "alc_1" || id.PlacementID != "plc_2" || id.Generation != 3 || id.Nonce != "ab12" {
		t.Fatalf("got %+v", id)
	}
}

func TestPrivateArgsAppendedWinOverCmdline(t *testing.T) {
	id, err := Parse("beachball.allocation_id=a beachball.placement_id=p beachball.generation=0 beachball.bootstrap_nonce=old beachball.bootstrap_nonce=new")
	if err != nil || id.Nonce != "new" {
		t.Fatalf("got %+v %v", id, err)
	}
}

func TestMissingOrMalformedKeysRefused(t *testing.T) {
	for _, c := range []string{
		"beachball.allocation_id=a beachball.placement_id=p beachball.generation=1",
		"beachball.allocation_id= beachball.placement_id=p beachball.generation=1 beachball.bootstrap_nonce=n",
		"beachball.allocation_id=a beachball.placement_id=p beachball.generation=-1 beachball.bootstrap_nonce=n",
		"beachball.allocation_id=a beachball.placement_id=p beachball.generation=9007199254740992 beachball.bootstrap_nonce=n",
		"beachball.allocation_id=a beachball.placement_id=p beachball.generation=x beachball.bootstrap_nonce=n",
	} {
		if _, err := Parse(c); err == nil {
			t.Errorf("accepted %q", c)
		}
	}
}
